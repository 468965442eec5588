"""Seed statistics: one summary number per run, then mean and 95% bootstrap CI over seeds.

- `summarize`: a run's metric curve to one number. The default is robust to the last point's
  noise: the mean over the last 10% of updates ("tail_mean"). "last", "best" (max) and "mean"
  stay selectable.
- `seed_interval`: the mean over seeds with a percentile bootstrap CI (scipy.stats.bootstrap).
  `statistic="iqm"` gives the interquartile mean instead (the mean of the middle 50% of seeds,
  scipy.stats.trim_mean(x, 0.25)) with the same bootstrap: rliable's convention (Agarwal et al.,
  "Deep RL at the Edge of the Statistical Precipice", 2021), whose stratified bootstrap resamples
  runs within each task; one cell is one task here, so within the cell.
- `difference_interval`: a cell minus a reference cell (e.g. the same objective at staleness 0),
  with a bootstrap CI of the difference of means (independent seeds).

Fewer than two seeds give no interval (low = high = NaN), and the verdicts call that inconclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from orchestrator.metrics.tail import TAIL_DIVISOR, tail_start

SUMMARIES = ("tail_mean", "last", "best", "mean")
DEFAULT_SUMMARY = "tail_mean"
HEAD_FRACTION = 1 / TAIL_DIVISOR  # the head mirrors the tail: the first 10% of the updates
CONFIDENCE = 0.95
RESAMPLES = 9999
STATISTICS = ("mean", "iqm")
IQM_CUT = 0.25  # trimmed from each end: the interquartile mean


def summarize(steps, values, how: str = DEFAULT_SUMMARY) -> float:
    """One number for one run's curve (points at `steps`, in any order). NaN when it has no points."""
    if how not in SUMMARIES:
        raise ValueError(f"summary: unknown {how!r}; known: {', '.join(SUMMARIES)}")
    steps, values = np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return math.nan
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order], values[order]
    if how == "last":
        return float(values[-1])
    if how == "best":
        return float(np.nanmax(values))
    if how == "mean":
        return float(np.nanmean(values))
    # the run page's tail mean (metrics.summaries): steps are whole updates
    return float(np.nanmean(values[steps >= tail_start(int(steps[0]), int(steps[-1]))]))


def head_mean(steps, values, fraction: float = HEAD_FRACTION) -> float:
    """The mean over the first 10% of a run's updates: where a curve starts (a fork's warm-up)."""
    steps, values = np.asarray(steps, dtype=np.float64), np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return math.nan
    first, last = steps.min(), steps.max()
    return float(np.nanmean(values[steps <= first + fraction * (last - first)]))


SMOOTHING_FRACTION = 0.05  # moving-average window for a curve's peak, as a fraction of its points


def smoothed_peak(values) -> float:
    """The highest moving average (window: 5% of the points, at least 1) of a curve in step order."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return math.nan
    window = max(1, int(round(values.size * SMOOTHING_FRACTION)))
    if window >= values.size:
        return float(np.mean(values))
    kernel = np.ones(window) / window
    return float(np.max(np.convolve(values, kernel, mode="valid")))


@dataclass(frozen=True)
class Estimate:
    mean: float
    low: float
    high: float
    n: int

    @property
    def has_interval(self) -> bool:
        return self.n >= 2 and not math.isnan(self.low)

    def overlaps(self, other: Estimate) -> bool:
        return self.low <= other.high and other.low <= self.high

    def as_dict(self) -> dict:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}


def _finite(values) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    return arr[np.isfinite(arr)]


def iqm(values, axis=-1):
    """The interquartile mean: the mean after cutting 25% of the values from each end (with 5
    seeds, int(0.25 x 5) = 1 each: the mean of the middle three)."""
    return stats.trim_mean(values, IQM_CUT, axis=axis)


_STATISTIC = {"mean": np.mean, "iqm": iqm}


def seed_interval(
    values, confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = 0, statistic: str = "mean"
) -> Estimate:
    """The mean (or IQM) over seeds and its percentile bootstrap CI; non-finite seeds are left out
    (and counted out of n)."""
    if statistic not in _STATISTIC:
        raise ValueError(f"statistic: unknown {statistic!r}; known: {', '.join(STATISTICS)}")
    fn = _STATISTIC[statistic]
    arr = _finite(values)
    if arr.size == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    point = float(fn(arr))
    if arr.size < 2:
        return Estimate(point, math.nan, math.nan, 1)
    if np.all(arr == arr[0]):  # every resample is the same: the interval is the point
        return Estimate(point, point, point, int(arr.size))
    res = stats.bootstrap(
        (arr,),
        fn,
        confidence_level=confidence,
        n_resamples=resamples,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return Estimate(point, float(res.confidence_interval.low), float(res.confidence_interval.high), int(arr.size))


def difference_interval(
    values, reference, confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = 0
) -> Estimate:
    """mean(values) - mean(reference), with a bootstrap CI over both sets of seeds (independent)."""
    a, b = _finite(values), _finite(reference)
    n = int(min(a.size, b.size))
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 0)
    diff = float(a.mean() - b.mean())
    if n < 2:
        return Estimate(diff, math.nan, math.nan, n)
    if np.all(a == a[0]) and np.all(b == b[0]):
        return Estimate(diff, diff, diff, n)
    res = stats.bootstrap(
        (a, b),
        lambda x, y, axis=-1: np.mean(x, axis=axis) - np.mean(y, axis=axis),
        confidence_level=confidence,
        n_resamples=resamples,
        method="percentile",
        paired=False,
        rng=np.random.default_rng(seed),
    )
    return Estimate(diff, float(res.confidence_interval.low), float(res.confidence_interval.high), n)
