"""Per-bucket downsampling of a series to a point budget.

A series over steps [lo, hi] is cut into buckets of `width` steps aligned on multiples of the
width. Each bucket keeps its minimum and its maximum (with their steps, in step order, ties to
the earliest step) and its latest non-finite point, so spikes and NaN/inf markers survive; the
series' very last point is always kept so live points extend it. Rollups store exactly these
aggregates, so a chart served from rollups equals one served from the points (tested).
"""
import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Bucket:
    min_step: int | None
    min_value: float | None
    max_step: int | None
    max_value: float | None
    last_step: int
    last_value: float | None
    last_special: int
    last_time: float | None
    special_step: int | None
    special_kind: int | None


def buckets_needed(max_points: int) -> int:
    """Buckets for a budget: two points each, plus the final point."""
    return max(1, (max_points - 1) // 2)


def bucket_width(lo: int, hi: int, max_points: int) -> int:
    return max(1, math.ceil((hi - lo + 1) / buckets_needed(max_points)))


def points_from_buckets(buckets: list[Bucket], field: str = "value") -> list[tuple[int, float | None, int]]:
    """(step, value, special) points of bucket aggregates, in step order."""
    if field == "time":
        return [(b.last_step, b.last_time, 0) for b in buckets]
    out: list[tuple[int, float | None, int]] = []
    for b in buckets:
        chosen: dict[int, tuple[int, float | None, int]] = {}
        if b.min_step is not None:
            chosen[b.min_step] = (b.min_step, b.min_value, 0)
        if b.max_step is not None:
            chosen.setdefault(b.max_step, (b.max_step, b.max_value, 0))
        if b.special_step is not None:
            chosen[b.special_step] = (b.special_step, None, b.special_kind)
        out.extend(chosen[s] for s in sorted(chosen))
    if buckets:
        last = buckets[-1]
        if not out or out[-1][0] < last.last_step:
            out.append((last.last_step, last.last_value, last.last_special))
    return out


def bucketize(steps: np.ndarray, values: np.ndarray, specials: np.ndarray, times: np.ndarray,
              width: int) -> list[Bucket]:
    """Bucket aggregates of step-sorted points (values NaN where specials != 0)."""
    n = len(steps)
    if n == 0:
        return []
    ids = steps // width
    starts = np.r_[0, np.flatnonzero(np.diff(ids)) + 1]
    ends = np.r_[starts[1:], n]
    finite = specials == 0
    pos = np.arange(n)
    low = np.where(finite, values, np.inf)
    high = np.where(finite, values, -np.inf)
    mins = np.minimum.reduceat(low, starts)
    maxs = np.maximum.reduceat(high, starts)
    bucket_of = np.repeat(np.arange(len(starts)), ends - starts)
    argmin = np.minimum.reduceat(np.where(finite & (low == mins[bucket_of]), pos, n), starts)
    argmax = np.minimum.reduceat(np.where(finite & (high == maxs[bucket_of]), pos, n), starts)
    last_special = np.maximum.reduceat(np.where(~finite, pos, -1), starts)
    out = []
    for i, end in enumerate(ends):
        last = end - 1
        has_finite = argmin[i] < n
        out.append(Bucket(
            min_step=int(steps[argmin[i]]) if has_finite else None,
            min_value=float(values[argmin[i]]) if has_finite else None,
            max_step=int(steps[argmax[i]]) if has_finite else None,
            max_value=float(values[argmax[i]]) if has_finite else None,
            last_step=int(steps[last]),
            last_value=None if specials[last] else float(values[last]),
            last_special=int(specials[last]),
            last_time=float(times[last]),
            special_step=int(steps[last_special[i]]) if last_special[i] >= 0 else None,
            special_kind=int(specials[last_special[i]]) if last_special[i] >= 0 else None,
        ))
    return out
