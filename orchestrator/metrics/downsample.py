"""Per-bucket downsampling of a series to a point budget.

A series over steps [lo, hi] is cut into buckets of `width` steps aligned on multiples of the
width. Each bucket keeps its minimum and its maximum (with their steps, in step order, ties to
the earliest step) and its latest non-finite point, so spikes and NaN/inf markers survive; the
series' very last point is always kept so live points extend it. Rollups store exactly these
aggregates, so a chart served from rollups equals one served from the points (tested).
"""

import math
from dataclasses import dataclass, fields

import numpy as np


def buckets_needed(max_points: int) -> int:
    """Buckets for a budget: two points each, plus the final point."""
    return max(1, (max_points - 1) // 2)


def bucket_width(lo: int, hi: int, max_points: int) -> int:
    return max(1, math.ceil((hi - lo + 1) / buckets_needed(max_points)))


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


def aggregate_groups(
    starts: np.ndarray, steps: np.ndarray, values: np.ndarray, specials: np.ndarray, times: np.ndarray
) -> GroupAggregates:
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
    argmin, argmax, special_at, last = (
        np.minimum(argmin, n - 1),
        np.minimum(argmax, n - 1),
        np.maximum(special_at, 0),
        ends - 1,
    )
    return GroupAggregates(
        n=ends - starts,
        has_finite=has_finite,
        min_value=values[argmin],
        min_step=steps[argmin],
        max_value=values[argmax],
        max_step=steps[argmax],
        last_step=steps[last],
        last_value=np.where(specials[last] == 0, values[last], np.nan),
        last_special=specials[last],
        last_time=times[last],
        has_special=has_special,
        special_step=steps[special_at],
        special_kind=specials[special_at],
    )


def bucketize(
    steps: np.ndarray, values: np.ndarray, specials: np.ndarray, times: np.ndarray, width: int
) -> GroupAggregates:
    """Bucket aggregates of step-sorted points (values NaN where specials != 0)."""
    if len(steps) == 0:
        return GroupAggregates(*(np.empty(0) for _ in fields(GroupAggregates)))
    ids = steps // width
    return aggregate_groups(np.r_[0, np.flatnonzero(np.diff(ids)) + 1], steps, values, specials, times)


def points_from_aggregates(g: GroupAggregates, field: str = "value") -> list[tuple[int, float | None, int]]:
    """(step, value, special) points of bucket aggregates, in step order: each bucket's min and
    max and its non-finite point (which wins a shared step, then the min does), and the series'
    last point when no bucket point reaches it. field="time" gives each bucket's last wall time."""
    if len(g.last_step) == 0:
        return []
    if field == "time":
        return [(s, t, 0) for s, t in zip(g.last_step.tolist(), g.last_time.tolist(), strict=True)]
    fin, spec = g.has_finite, g.has_special
    max_too = fin & (g.max_step != g.min_step)
    steps = np.concatenate([g.special_step[spec], g.min_step[fin], g.max_step[max_too]]).astype(np.int64)
    values = np.concatenate([np.full(int(spec.sum()), np.nan), g.min_value[fin], g.max_value[max_too]])
    specials = np.concatenate([g.special_kind[spec], np.zeros(int(fin.sum() + max_too.sum()))]).astype(np.int64)
    rank = np.concatenate([np.zeros(int(spec.sum())), np.ones(int(fin.sum())), np.full(int(max_too.sum()), 2)])
    order = np.lexsort((rank, steps))
    steps, values, specials = steps[order], values[order], specials[order]
    first = np.r_[True, np.diff(steps) != 0]
    out = [
        (s, None if k else v, k)
        for s, v, k in zip(steps[first].tolist(), values[first].tolist(), specials[first].tolist(), strict=True)
    ]
    last_step, last_special = int(g.last_step[-1]), int(g.last_special[-1])
    if not out or out[-1][0] < last_step:
        out.append((last_step, None if last_special else float(g.last_value[-1]), last_special))
    return out
