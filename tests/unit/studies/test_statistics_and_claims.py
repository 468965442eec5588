"""Seed statistics against values computed by hand: intervals, paired and unpaired differences,
equivalence, and the warm-up's share of the spread."""

import math

import numpy as np
import pytest

from orchestrator.studies.statistics import (
    Estimate,
    difference_interval,
    difference_of_means,
    equivalence,
    seed_interval,
    summarize,
    t_interval,
    warmup_spread,
)


def test_tail_mean_is_the_mean_of_the_last_tenth_of_updates():
    # updates 1..20: the last 10% of the span (from update 18.1 on) holds updates 19 and 20
    assert summarize(range(1, 21), range(1, 21)) == 19.5
    assert summarize([3, 1, 2], [30, 10, 20], "last") == 30  # order by step, not by position
    assert summarize([1, 2, 3], [5, 9, 1], "best") == 9
    assert math.isnan(summarize([], []))
    with pytest.raises(ValueError, match="summary"):
        summarize([1], [1], "median")


def test_the_seed_interval_is_student_t_by_hand():
    # [1, 2, 3]: mean 2, s = 1, t_{2, 0.975} = 4.302653: 2 ± 2.484138
    e = seed_interval([1, 2, 3])
    assert (e.mean, e.n) == (2.0, 3)
    assert (e.low, e.high) == (pytest.approx(2 - 2.484138, rel=1e-6), pytest.approx(2 + 2.484138, rel=1e-6))


def test_t_intervals_cover_95_percent_at_five_seeds():
    """Coverage simulated with a fixed seed: 4,000 studies of 5 normal seeds each, the true mean 0.
    The t interval covers 95% in expectation (binomial SD 0.34%): at least 0.93 is asked. The
    percentile bootstrap this replaces covers about 83% here (the issue's audit: 85%)."""
    rng = np.random.default_rng(20261207)
    draws = rng.normal(0.0, 1.0, size=(4000, 5))
    covered = [(e := seed_interval(row)).low <= 0.0 <= e.high for row in draws]
    assert np.mean(covered) >= 0.93
    # and the difference of two cells (Welch), both true means 0.5
    pairs = rng.normal(0.5, 0.1, size=(4000, 2, 5))
    covered = [(d := difference_interval(a, b)).low <= 0.0 <= d.high for a, b in pairs]
    assert np.mean(covered) >= 0.93


def test_the_iqm_is_the_middle_seeds_mean_with_the_exact_bootstrap_interval():
    # 5 seeds, one collapsed: int(0.25 x 5) = 1 cut from each end, so the IQM is the middle three's
    # mean and the collapse vanishes from it (why the verdicts use the mean)
    seeds = [0.28, 0.56, 0.57, 0.63, 0.65]
    assert seed_interval(seeds, statistic="iqm").mean == pytest.approx((0.56 + 0.57 + 0.63) / 3)
    assert seed_interval(seeds).mean == pytest.approx(0.538)
    # [0, 0, 0, 1]: of the 256 equally likely resamples, the IQM (the middle two of four) is 0 in
    # 73.8% and at most 0.5 in 94.9% (< 97.5%), so the exact 95% percentile interval is [0, 1]
    assert seed_interval([0, 0, 0, 1], statistic="iqm") == Estimate(0.0, 0.0, 1.0, 4)


def test_intervals_need_two_finite_seeds_and_collapse_on_identical_ones():
    one = seed_interval([0.7, math.nan])
    assert (one.mean, one.n) == (0.7, 1) and math.isnan(one.low) and not one.has_interval
    assert seed_interval([0.5, 0.5]) == Estimate(0.5, 0.5, 0.5, 2)


def test_difference_against_a_reference_cell_is_welch():
    # a = [1, 1, 1] (variance 0), b = [0, 0, 1] (variance 1/3): se^2 = 1/9, Welch's df = 2
    d = difference_interval([1.0, 1.0, 1.0], [0.0, 0.0, 1.0])
    assert d.mean == pytest.approx(2 / 3)
    assert d.high - d.mean == pytest.approx(4.302653 / 3, rel=1e-5)


def test_t_interval_by_hand():
    # [1, 2, 3]: mean 2, s = 1, t_{2, 0.975} = 4.3027: 2 ± 4.3027 / sqrt(3)
    e = t_interval([1, 2, 3])
    assert (e.mean, e.n) == (2.0, 3) and e.high - e.mean == pytest.approx(4.302653 / 3**0.5, rel=1e-5)
    assert not t_interval([0.7]).has_interval


def test_a_difference_pairs_by_unit_when_the_units_match_else_welch():
    on = {("w", 1): 0.80, ("w", 2): 0.90, ("w", 3): 0.70}
    stale = {("w", 1): 0.75, ("w", 2): 0.86, ("w", 3): 0.64}
    paired = difference_of_means(on, stale)
    assert paired.paired and paired.estimate.mean == pytest.approx(0.05)
    # the seed effect (±0.1) cancels in the pairs: the paired interval is far narrower than Welch's
    welch = difference_of_means(on, {("w", k + 10): v for (_, k), v in stale.items()})
    assert not welch.paired and welch.estimate.mean == pytest.approx(0.05)
    assert paired.estimate.high - paired.estimate.low < (welch.estimate.high - welch.estimate.low) / 5


def test_tost_needs_the_90_percent_interval_inside_the_margin():
    on = dict(enumerate([0.80, 0.81, 0.79, 0.80, 0.80]))
    close = {i: v + 0.005 for i, v in on.items()}
    assert equivalence(close, on, 0.03)[0] is True
    far = {i: v - 0.2 for i, v in on.items()}
    assert equivalence(far, on, 0.03)[0] is False
    assert equivalence({0: 0.8}, {0: 0.8}, 0.03)[0] is None  # one run: no interval


def test_the_warm_up_spread_by_hand():
    # two warm-ups, seeds within each differing by ±0.01: within SD = sqrt(2 x 0.0001 x 2 / 2)
    spread = warmup_spread({"w1": [0.69, 0.71], "w2": [0.79, 0.81]})
    assert spread.warmups == 2 and spread.between_sd == pytest.approx(0.1 / 2**0.5)
    assert spread.within_sd == pytest.approx(0.01414, rel=1e-3)
    assert spread.warmup_variance_share > 0.9  # the warm-up, not the seed, moves the result
    assert math.isnan(warmup_spread({"w1": [0.7, 0.8]}).between_sd)
