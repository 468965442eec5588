"""Run summaries: per (run, key) the last value, min, max, point count and tail mean, for runs
tables, the API, the filter language and the heatmap.

`last`, `min`, `max`, `count` and `last_step` come from models.MetricSeries, which ingestion keeps
up to date from each batch's own aggregates (O(batch)).

`tail_mean` is the mean of the finite live values at steps >= last_step - (last_step -
first_step) // 10: the last 10% of the key's step span (a one-point series is its own tail). None
when the tail holds no finite value (all NaN/inf). A running mean of "the last 10%" cannot be
maintained in O(batch) (the window moves with every new step), so it is exact and computed on
read, from per-chunk sums that ingestion stores with each chunk (`MetricChunk.sum_value`,
`n_finite`): chunks inside the tail are added from those columns by the database without
unpacking them, and only the few chunks that straddle the tail's start are unpacked. The result
is cached on the series row for the `revision` of its points (bumped by every change), so a
finished run computes it once, an active one once per read that follows new points, and the
filter language can compare the column (`refresh_stale_tails` first).

Values are floats; NaN and infinities of `last` come back as float('nan') / float('inf'), min
and max are over finite values (None when there are none).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from django.db import connection
from django.db.models import F, Q, Sum

from orchestrator.metrics.chunks import as_float, unpack
from orchestrator.metrics.models import MetricChunk, MetricSeries
from orchestrator.metrics.tail import tail_start

FIELDS = ("last", "min", "max", "tail_mean", "count", "last_step")
_PAIRS_PER_QUERY = 400


def run_summaries(run_ids: Iterable[int], keys: list[str] | None = None) -> dict[int, dict[str, dict]]:
    """{run_id: {key: {"last", "min", "max", "tail_mean", "count", "last_step"}}} for the keys
    (all of each run's keys when None). Runs and keys without points are absent. One query, plus
    two per ~400 series whose points changed since their tail mean was last computed."""
    rows = MetricSeries.objects.filter(run_id__in=list(run_ids))
    if keys is not None:
        rows = rows.filter(key__in=list(keys))
    found = list(
        rows.values_list(
            "id",
            "run_id",
            "key",
            "first_step",
            "last_step",
            "last_value",
            "last_special",
            "min_value",
            "max_value",
            "count",
            "revision",
            "tail_mean",
            "tail_revision",
        )
    )
    tails = refresh_tails([(r[0], r[1], r[2], r[3], r[4], r[10]) for r in found if r[12] != r[10]])
    out: dict[int, dict[str, dict]] = {}
    for sid, rid, key, _first, last_step, last_value, last_special, mn, mx, count, _rev, tail, _tail_rev in found:
        out.setdefault(rid, {})[key] = {
            "last": as_float(last_value, last_special),
            "min": mn,
            "max": mx,
            "tail_mean": tails.get(sid, tail),
            "count": count,
            "last_step": last_step,
        }
    return out


def refresh_tails(stale: list[tuple[int, int, str, int, int, int]]) -> dict[int, float | None]:
    """Compute the tail means of series rows (id, run, key, first_step, last_step, revision) and
    cache each for its revision (unless the series changed meanwhile); {id: tail mean}."""
    if not stale:
        return {}
    means = tail_means({(rid, key): tail_start(first, last) for _, rid, key, first, last, _ in stale})
    out = {sid: means[(rid, key)] for sid, rid, key, *_ in stale}
    for i in range(0, len(stale), _PAIRS_PER_QUERY):
        part = stale[i : i + _PAIRS_PER_QUERY]
        means_sql = " ".join(["WHEN %s THEN CAST(%s AS DOUBLE PRECISION)"] * len(part))
        revisions_sql = " ".join(["WHEN %s THEN %s"] * len(part))
        sql = (
            f"UPDATE {MetricSeries._meta.db_table} SET tail_mean = CASE id {means_sql} END, "
            f"tail_revision = revision WHERE id IN ({', '.join(['%s'] * len(part))}) "
            f"AND revision = CASE id {revisions_sql} END"
        )  # a series changed meanwhile stays stale
        tails = [v for sid, *_ in part for v in (sid, out[sid])]
        revisions = [v for sid, *_, revision in part for v in (sid, revision)]
        with connection.cursor() as cur:
            cur.execute(sql, [*tails, *[sid for sid, *_ in part], *revisions])
    return out


def refresh_stale_tails(key: str) -> None:
    """Bring every run's cached tail mean of `key` up to date (before filtering on it)."""
    stale = (
        MetricSeries.objects.filter(key=key)
        .exclude(tail_revision=F("revision"))
        .values_list("id", "run_id", "key", "first_step", "last_step", "revision")
    )
    refresh_tails(list(stale))


def tail_means(starts: dict[tuple[int, str], int]) -> dict[tuple[int, str], float | None]:
    """{(run, key): mean of the finite live values at steps >= start}."""
    totals = {pair: [0.0, 0] for pair in starts}
    pairs = list(starts)
    for i in range(0, len(pairs), _PAIRS_PER_QUERY):
        part = pairs[i : i + _PAIRS_PER_QUERY]
        inside, straddling = Q(), Q()
        for rid, key in part:
            a = starts[(rid, key)]
            inside |= Q(run_id=rid, key=key, first_step__gte=a)
            straddling |= Q(run_id=rid, key=key, first_step__lt=a, last_step__gte=a)
        live = MetricChunk.objects.filter(superseded=False)
        for rid, key, total, n in (
            live.filter(inside)
            .values("run_id", "key")
            .annotate(total=Sum("sum_value"), n=Sum("n_finite"))
            .values_list("run_id", "key", "total", "n")
        ):
            totals[(rid, key)][0] += total or 0.0
            totals[(rid, key)][1] += n or 0
        for rid, key, *blobs in live.filter(straddling).values_list(
            "run_id", "key", "steps", "values", "specials", "times"
        ):
            points = unpack(*blobs)
            take = (points.steps >= starts[(rid, key)]) & (points.specials == 0)
            totals[(rid, key)][0] += float(np.sum(points.values[take]))
            totals[(rid, key)][1] += int(take.sum())
    return {pair: (total / n if n else None) for pair, (total, n) in totals.items()}


def encode_summary(summary: dict) -> dict:
    """A summary as JSON allows: a non-finite last value as "NaN", "Infinity" or "-Infinity"."""
    from orchestrator.metrics.schemas import encode_value

    return {**summary, "last": encode_value(summary["last"])}
