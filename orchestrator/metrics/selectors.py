"""Reads of metric data: chart series (one or many runs), latest values and summaries."""

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from django.conf import settings
from django.db import connection, transaction

from orchestrator.metrics import store
from orchestrator.metrics.chunks import as_float, live_points
from orchestrator.metrics.downsample import GroupAggregates, bucket_width, bucketize, points_from_aggregates
from orchestrator.metrics.models import MAX_STEP, MetricAttempt, MetricSeries
from trainer.metric_keys import direction, parse_directions

DEFAULT_MAX_POINTS = 1500
MAX_MAX_POINTS = 20_000
Point = tuple[int, float | None, int]  # (step, value, special)


@dataclass(frozen=True)
class Window:
    lo: int
    hi: int
    width: int  # bucket width in steps; 1 = every point
    level: int  # rollup width read, 0 = points


def plan_window(lo: int, hi: int, max_points: int, *, rollups: bool) -> Window:
    """Choose the bucket width for [lo, hi] and the rollup level to read: the coarsest level
    that divides a chart bucket into whole rollup buckets while widening it by at most 50%
    (so the answer stays close to the budget), else the points themselves."""
    width = bucket_width(lo, hi, max_points)
    fitting = [w for w in store.LEVELS if w <= width] if rollups else []
    if not fitting:
        return Window(lo, hi, width, 0)
    level = next((w for w in reversed(fitting) if math.ceil(width / w) * w <= 1.5 * width), 0)
    if not level:  # just above the finest level: its buckets would halve the budget, so read the points
        return Window(lo, hi, width, 0)
    width = math.ceil(width / level) * level  # whole rollup buckets per chart bucket
    return Window(lo, hi, width, level)


def series(
    run_ids: Iterable[int],
    key: str,
    *,
    start: int | None = None,
    end: int | None = None,
    max_points: int = DEFAULT_MAX_POINTS,
    field: str = "value",
) -> dict[int, list[Point]]:
    """One key of many runs over [start, end], each downsampled to about max_points points.

    All runs share one bucket grid. field="time" gives each bucket's last (step, wall time),
    the mapping used for a wall-clock x-axis."""
    run_ids = list(run_ids)
    result: dict[int, list[Point]] = {rid: [] for rid in run_ids}
    bounds = MetricSeries.objects.filter(run_id__in=run_ids, key=key).values_list("first_step", "last_step")
    if not bounds:
        return result
    lo = max(start if start is not None else 0, min(b[0] for b in bounds))
    hi = min(end if end is not None else MAX_STEP, max(b[1] for b in bounds))
    if lo > hi:
        return result
    window = plan_window(lo, hi, max_points, rollups=store.is_postgres())
    fetch = _from_rollups if window.level else _from_points
    result.update(fetch(run_ids, key, window, max_points, field))
    return result


def _from_points(run_ids, key, window: Window, max_points: int, field: str) -> dict[int, list[Point]]:
    out = {}
    for (rid, _), pts in live_points(run_ids, [key], lo=window.lo, hi=window.hi).items():
        if len(pts) > max_points:
            out[rid] = points_from_aggregates(
                bucketize(pts.steps, pts.values, pts.specials, pts.times, window.width), field
            )
        elif field == "time":
            out[rid] = [(s, t, 0) for s, t in zip(pts.steps.tolist(), pts.times.tolist(), strict=True)]
        else:
            out[rid] = pts.rows()
    return out


# One row per (run, drawn bucket), as plain columns (arrays would be parsed in Python).
_ROLLUP_QUERY = f"""
SELECT run_id, mn[1], mn[2]::int8, mx[1], (-mx[2])::int8, last[1]::int8, last[2], last[3]::int2, last[4],
       sp[1]::int8, sp[2]::int2
FROM (
  SELECT run_id, bucket / %(k)s AS qb,
    min(ARRAY[min_value, min_step]) FILTER (WHERE min_value IS NOT NULL) AS mn,
    max(ARRAY[max_value, -max_step]) FILTER (WHERE max_value IS NOT NULL) AS mx,
    max(ARRAY[last_step, last_value, last_special, last_time]) AS last,
    max(ARRAY[special_step, special_kind]) FILTER (WHERE special_step IS NOT NULL) AS sp
  FROM {store.ROLLUP}
  WHERE run_id = ANY(%(runs)s) AND key = %(key)s AND width = %(level)s AND bucket >= %(b0)s AND bucket <= %(b1)s
  GROUP BY run_id, qb
) g
ORDER BY run_id, qb
"""


def _from_rollups(run_ids, key, window: Window, max_points: int, field: str) -> dict[int, list[Point]]:
    params = {
        "k": window.width // window.level,
        "runs": run_ids,
        "key": key,
        "level": window.level,
        "b0": window.lo // window.level,
        "b1": window.hi // window.level,
    }
    with transaction.atomic(), connection.cursor() as cur:
        # A compare page groups tens of thousands of rows; the default 4 MB spilled that to disk.
        cur.execute("SET LOCAL work_mem = '64MB'")
        cur.execute(_ROLLUP_QUERY, params)
        rows = cur.fetchall()
    if not rows:
        return {}
    run, min_value, min_step, max_value, max_step, last_step, last_value, last_special, last_time, sp_step, sp_kind = (
        list(c) for c in zip(*rows, strict=True)
    )
    floats = [np.array(c, dtype=np.float64) for c in (min_value, max_value, last_value, last_time)]  # None -> NaN
    ints = [
        np.array([-1 if v is None else v for v in c], dtype=np.int64)
        for c in (min_step, max_step, last_step, last_special, sp_step, sp_kind)
    ]
    has_finite = np.array([v is not None for v in min_step])
    has_special = np.array([v is not None for v in sp_step])
    runs = np.array(run)
    starts = np.r_[0, np.flatnonzero(np.diff(runs)) + 1]
    out = {}
    for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(runs)], strict=True):
        g = GroupAggregates(
            n=np.zeros(b - a, np.int64),
            has_finite=has_finite[a:b],
            min_value=floats[0][a:b],
            min_step=ints[0][a:b],
            max_value=floats[1][a:b],
            max_step=ints[1][a:b],
            last_step=ints[2][a:b],
            last_value=floats[2][a:b],
            last_special=ints[3][a:b],
            last_time=floats[3][a:b],
            has_special=has_special[a:b],
            special_step=ints[4][a:b],
            special_kind=ints[5][a:b],
        )
        out[int(runs[a])] = points_from_aggregates(g, field)
    return out


def attempt_starts(run_ids: Iterable[int]) -> dict[int, list[list[int]]]:
    """{run_id: [[attempt, start_step], ...]} for attempt markers on charts."""
    out: dict[int, list[list[int]]] = {}
    for rid, attempt, start in (
        MetricAttempt.objects.filter(run_id__in=list(run_ids))
        .order_by("run_id", "attempt")
        .values_list("run_id", "attempt", "start_step")
    ):
        out.setdefault(rid, []).append([attempt, start])
    return out


def current_seq(run_id: int) -> int:
    return store.last_seq(run_id)


def run_keys(run_id: int) -> list[str]:
    return list(MetricSeries.objects.filter(run_id=run_id).order_by("key").values_list("key", flat=True))


def keys_of(run_ids: Iterable[int]) -> list[str]:
    """The keys any of the runs has, sorted."""
    return list(
        MetricSeries.objects.filter(run_id__in=list(run_ids)).order_by("key").values_list("key", flat=True).distinct()
    )


def latest_values(run_ids: Iterable[int], keys: Iterable[str]) -> dict[int, dict[str, float]]:
    """{run_id: {key: latest value}} for a runs table; NaN/±inf come back as floats. Runs or
    keys without points are absent. One indexed query, independent of the number of points."""
    out: dict[int, dict[str, float]] = {}
    rows = MetricSeries.objects.filter(run_id__in=list(run_ids), key__in=list(keys))
    for rid, key, value, special in rows.values_list("run_id", "key", "last_value", "last_special"):
        out.setdefault(rid, {})[key] = as_float(value, special)
    return out


def metric_direction(key: str) -> str | None:
    """ "max", "min" or None: the trainer's metric-key table, with the lab's own keys from
    OPL_METRIC_DIRECTIONS ("custom/score=max,custom/*_loss=min") taking precedence."""
    return direction(key, _custom_directions(getattr(settings, "OPL_METRIC_DIRECTIONS", "")))


@lru_cache(maxsize=8)
def _custom_directions(text: str) -> dict[str, str]:
    return parse_directions(text)


def summaries(run_ids: Iterable[int], keys: Iterable[str] | None = None) -> dict[int, dict[str, dict]]:
    """{run_id: {key: {last, last_step, min, max, best, direction}}} (JSON-safe: NaN/inf as
    strings). best is the max or the min by the key's declared direction, None without one."""
    from orchestrator.metrics.schemas import encode_value

    rows = MetricSeries.objects.filter(run_id__in=list(run_ids))
    if keys is not None:
        rows = rows.filter(key__in=list(keys))
    out: dict[int, dict[str, dict]] = {}
    for s in rows:
        way = metric_direction(s.key)
        best = {"max": s.max_value, "min": s.min_value}.get(way)
        out.setdefault(s.run_id, {})[s.key] = {
            "last": encode_value(s.last_value, s.last_special),
            "last_step": s.last_step,
            "min": s.min_value,
            "max": s.max_value,
            "best": best,
            "direction": way,
        }
    return out


def key_exists(key: str) -> bool:
    """Whether any run has stored this key (a key may hold commas: a request names it whole)."""
    return MetricSeries.objects.filter(key=key).exists()
