"""Seed statistics against values computed by hand, and the claim verdicts on small cases."""

import math

import pytest

from orchestrator.studies import claims
from orchestrator.studies.statistics import Estimate, difference_interval, seed_interval, summarize


def test_tail_mean_is_the_mean_of_the_last_tenth_of_updates():
    # updates 1..20: the last 10% of the span (from update 18.1 on) holds updates 19 and 20
    assert summarize(range(1, 21), range(1, 21)) == 19.5
    assert summarize([3, 1, 2], [30, 10, 20], "last") == 30  # order by step, not by position
    assert summarize([1, 2, 3], [5, 9, 1], "best") == 9
    assert math.isnan(summarize([], []))
    with pytest.raises(ValueError, match="summary"):
        summarize([1], [1], "median")


def test_bootstrap_interval_matches_the_exact_bootstrap_distribution_by_hand():
    # [1, 2, 3]: 27 equally likely resamples; a mean of 1 (or of 3) has probability 1/27 = 3.7%,
    # more than 2.5%, so the exact 95% percentile interval is [1, 3].
    assert seed_interval([1, 2, 3]) == Estimate(2.0, 1.0, 3.0, 3)
    # [0, 0, 0, 1]: P(mean = 0) = (3/4)^4 = 31.6% -> low 0; P(mean >= 0.75) = 5.1% but
    # P(mean = 1) = 0.4% -> high 0.75.
    assert seed_interval([0, 0, 0, 1]) == Estimate(0.25, 0.0, 0.75, 4)


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


def test_difference_against_a_reference_cell():
    # a is constant 1, so the difference is 1 - mean(b*) over resamples b* of b
    d = difference_interval([1.0, 1.0, 1.0], [0.0, 0.0, 1.0])
    assert d.mean == pytest.approx(2 / 3)
    # b's resample mean is 0 with probability (2/3)^3 = 29.6% and 1 with 3.7%: the interval of
    # 1 - mean(b) is [0, 1]
    assert (d.low, d.high) == (pytest.approx(0.0), pytest.approx(1.0))


def E(mean, low, high, n=3):
    return Estimate(mean, low, high, n)


def test_claim_a_needs_a_gap_and_separate_intervals():
    th = claims.Thresholds()
    assert claims.stale_clip_below_on_policy(E(0.9, 0.85, 0.95), E(0.5, 0.45, 0.55), th).status == claims.REPRODUCED
    assert (
        claims.stale_clip_below_on_policy(E(0.9, 0.6, 1.0), E(0.7, 0.5, 0.8), th).status == claims.INCONCLUSIVE
    )  # CIs overlap
    not_rep = claims.stale_clip_below_on_policy(E(0.9, 0.85, 0.95), E(0.85, 0.8, 0.9), th)
    assert not_rep.status == claims.NOT_REPRODUCED and "less than the 0.1 required" in not_rep.reason
    assert (
        claims.stale_clip_below_on_policy(E(0.9, math.nan, math.nan, 1), E(0.1, 0, 0.2)).status == claims.INCONCLUSIVE
    )


def test_claim_b_is_about_overlap_with_on_policy():
    assert claims.m2po_matches_on_policy(E(0.9, 0.8, 1.0), E(0.85, 0.75, 0.95)).status == claims.REPRODUCED
    assert claims.m2po_matches_on_policy(E(0.9, 0.85, 0.95), E(0.5, 0.4, 0.6)).status == claims.NOT_REPRODUCED
    wide = claims.m2po_matches_on_policy(E(0.6, 0.3, 0.9), E(0.5, 0.1, 0.9))  # overlap of two 0.6-wide CIs
    assert wide.status == claims.INCONCLUSIVE and "wide" in wide.reason


def test_claim_c_compares_mask_and_clip_fractions():
    assert claims.m2po_masks_fewer_than_clip_clips(0.0006, 0.0122).status == claims.REPRODUCED  # the paper's figures
    toy = claims.m2po_masks_fewer_than_clip_clips(0.16, 0.26)  # the CPU probe's figures
    assert toy.status == claims.NOT_REPRODUCED and toy.numbers["ratio"] == pytest.approx(0.16 / 0.26)
    assert claims.m2po_masks_fewer_than_clip_clips(0.01, 0.0).status == claims.INCONCLUSIVE


def test_claim_d_is_a_fall_from_the_peak_or_a_non_finite_value():
    assert claims.no_clip_collapses([0.8, 0.9], [0.3, 0.4], False).status == claims.REPRODUCED
    stagnates = claims.no_clip_collapses([0.8, 0.9, 0.7], [0.78, 0.88, 0.69], False)
    assert stagnates.status == claims.NOT_REPRODUCED and "stagnation" in stagnates.reason
    assert claims.no_clip_collapses([0.8], [0.8], True).status == claims.REPRODUCED
