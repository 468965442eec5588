"""Run summaries: per (run, key) the last value, min, max, point count and tail mean, for runs
tables, the API, the filter language and the heatmap.

`last`, `min`, `max`, `count` and `last_step` come from models.MetricSeries, which ingestion keeps
up to date from each batch's own aggregates (O(batch)).

`tail_mean` is the mean of the finite live values at steps >= last_step - (last_step -
first_step) // 10: the last 10% of the key's step span (a one-point series is its own tail). It
is exact, and computed at read time from per-chunk sums that ingestion stores with each chunk
(`MetricChunk.sum_value`, `n_finite`): chunks that lie inside the tail are added from those
columns by PostgreSQL (or SQLite) without unpacking them, and only the few chunks that straddle
the tail's start are unpacked. A running mean of "the last 10%" cannot be maintained in O(batch)
as the window moves with every new step, so it is not stored. None when the tail holds no finite
value (all NaN/inf).

Values are floats; NaN and infinities of `last` come back as float('nan') / float('inf'), min
and max are over finite values (None when there are none).
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from django.db.models import Q, Sum

from orchestrator.metrics.chunks import unpack
from orchestrator.metrics.models import MetricChunk, MetricSeries

FIELDS = ("last", "min", "max", "tail_mean", "count", "last_step")
TAIL_FRACTION = 10  # the tail is the last 1/10 of the step span
_PAIRS_PER_QUERY = 400


def tail_start(first_step: int, last_step: int) -> int:
    """The first step of a key's tail: the last 10% of its step span."""
    return last_step - (last_step - first_step) // TAIL_FRACTION


def run_summaries(run_ids: Iterable[int], keys: list[str] | None = None) -> dict[int, dict[str, dict]]:
    """{run_id: {key: {"last", "min", "max", "tail_mean", "count", "last_step"}}} for the keys
    (all of each run's keys when None). Runs and keys without points are absent. Two queries per
    ~400 (run, key) pairs, whatever the series' lengths."""
    from orchestrator.metrics.services import as_float

    rows = MetricSeries.objects.filter(run_id__in=list(run_ids))
    if keys is not None:
        rows = rows.filter(key__in=list(keys))
    found = list(rows.values_list("run_id", "key", "first_step", "last_step", "last_value", "last_special",
                                  "min_value", "max_value", "count"))
    starts = {(rid, key): tail_start(first, last) for rid, key, first, last, *_ in found}
    tails = tail_means(starts)
    out: dict[int, dict[str, dict]] = {}
    for rid, key, _first, last_step, last_value, last_special, mn, mx, count in found:
        out.setdefault(rid, {})[key] = {
            "last": as_float(last_value, last_special), "min": mn, "max": mx,
            "tail_mean": tails.get((rid, key)), "count": count, "last_step": last_step,
        }
    return out


def tail_means(starts: dict[tuple[int, str], int]) -> dict[tuple[int, str], float | None]:
    """{(run, key): mean of the finite live values at steps >= start}."""
    totals = {pair: [0.0, 0] for pair in starts}
    pairs = list(starts)
    for i in range(0, len(pairs), _PAIRS_PER_QUERY):
        part = pairs[i:i + _PAIRS_PER_QUERY]
        inside, straddling = Q(), Q()
        for rid, key in part:
            a = starts[(rid, key)]
            inside |= Q(run_id=rid, key=key, first_step__gte=a)
            straddling |= Q(run_id=rid, key=key, first_step__lt=a, last_step__gte=a)
        live = MetricChunk.objects.filter(superseded=False)
        for rid, key, total, n in (live.filter(inside).values("run_id", "key")
                                   .annotate(total=Sum("sum_value"), n=Sum("n_finite"))
                                   .values_list("run_id", "key", "total", "n")):
            totals[(rid, key)][0] += total or 0.0
            totals[(rid, key)][1] += n or 0
        for rid, key, *blobs in live.filter(straddling).values_list("run_id", "key", "steps", "values", "specials",
                                                                    "times"):
            points = unpack(*blobs)
            take = (points.steps >= starts[(rid, key)]) & (points.specials == 0)
            totals[(rid, key)][0] += float(np.sum(points.values[take]))
            totals[(rid, key)][1] += int(take.sum())
    return {pair: (total / n if n else None) for pair, (total, n) in totals.items()}


def encode_summary(summary: dict) -> dict:
    """A summary as JSON allows: a non-finite last value as "NaN", "Infinity" or "-Infinity"."""
    from orchestrator.metrics.schemas import encode_value

    return {**summary, "last": encode_value(summary["last"])}
