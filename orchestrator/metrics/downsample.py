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


@dataclass(frozen=True)
class GroupAggregates:
    """Bucket aggregates of many groups at once, as arrays with one entry per group.
    `has_finite` and `has_special` say where the min/max and special fields mean something."""

    n: np.ndarray
    has_finite: np.ndarray
    min_value: np.ndarray
    min_step: np.ndarray
    max_value: np.ndarray
    max_step: np.ndarray
    last_step: np.ndarray
    last_value: np.ndarray  # NaN where last_special != 0
    last_special: np.ndarray
    last_time: np.ndarray
    has_special: np.ndarray
    special_step: np.ndarray
    special_kind: np.ndarray


def aggregate_groups(starts: np.ndarray, steps: np.ndarray, values: np.ndarray, specials: np.ndarray,
                     times: np.ndarray) -> GroupAggregates:
    """Aggregates of consecutive groups of step-sorted points; group i is [starts[i], starts[i+1]).
    Min and max ties go to the earliest step; the special point is the latest non-finite one."""
    n = len(steps)
    ends = np.r_[starts[1:], n]
    finite = specials == 0
    pos = np.arange(n)
    low = np.where(finite, values, np.inf)
    high = np.where(finite, values, -np.inf)
    mins = np.minimum.reduceat(low, starts)
    maxs = np.maximum.reduceat(high, starts)
    group_of = np.repeat(np.arange(len(starts)), ends - starts)
    argmin = np.minimum.reduceat(np.where(finite & (low == mins[group_of]), pos, n), starts)
    argmax = np.minimum.reduceat(np.where(finite & (high == maxs[group_of]), pos, n), starts)
    special_at = np.maximum.reduceat(np.where(~finite, pos, -1), starts)
    has_finite, has_special = argmin < n, special_at >= 0
    argmin, argmax, special_at, last = (np.minimum(argmin, n - 1), np.minimum(argmax, n - 1),
                                        np.maximum(special_at, 0), ends - 1)
    return GroupAggregates(
        n=ends - starts, has_finite=has_finite,
        min_value=values[argmin], min_step=steps[argmin], max_value=values[argmax], max_step=steps[argmax],
        last_step=steps[last], last_value=np.where(specials[last] == 0, values[last], np.nan),
        last_special=specials[last], last_time=times[last],
        has_special=has_special, special_step=steps[special_at], special_kind=specials[special_at],
    )


def bucketize(steps: np.ndarray, values: np.ndarray, specials: np.ndarray, times: np.ndarray,
              width: int) -> list[Bucket]:
    """Bucket aggregates of step-sorted points (values NaN where specials != 0)."""
    if len(steps) == 0:
        return []
    ids = steps // width
    g = aggregate_groups(np.r_[0, np.flatnonzero(np.diff(ids)) + 1], steps, values, specials, times)
    return [
        Bucket(
            min_step=int(g.min_step[i]) if g.has_finite[i] else None,
            min_value=float(g.min_value[i]) if g.has_finite[i] else None,
            max_step=int(g.max_step[i]) if g.has_finite[i] else None,
            max_value=float(g.max_value[i]) if g.has_finite[i] else None,
            last_step=int(g.last_step[i]),
            last_value=None if g.last_special[i] else float(g.last_value[i]),
            last_special=int(g.last_special[i]),
            last_time=float(g.last_time[i]),
            special_step=int(g.special_step[i]) if g.has_special[i] else None,
            special_kind=int(g.special_kind[i]) if g.has_special[i] else None,
        )
        for i in range(len(g.n))
    ]
