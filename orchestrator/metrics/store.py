"""Writing metric storage: chunks of points, supersession, per-key summaries and rollups.

Every function runs inside the caller's transaction, under the run's batch lock (next_seq), so a
run's writes never interleave. A batch is stored as one chunk per key (models.MetricChunk);
summaries and rollups are folded in from the batch's own numpy aggregates (batches.py), whether
the batch appends or lands behind a key's head: the merges are order-independent, so a batch costs
in proportion to its own size, not to the series'. Only a re-post that changes a stored value, and
a restart, recompute what they touch from the stored chunks. SQLite, used by the demo, has no
rollups (its charts read chunks).
"""
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from django.db import connection, transaction
from django.db.models import F, Max, Q

from orchestrator.metrics.chunks import Points, live_series, pack, unpack

# Rollup bucket widths in steps, finest first; every level is aggregated from the points.
# Fanout 4 keeps a chart's read within 4 rollup rows per drawn bucket (compare pages read many runs).
# Charts of fewer than ~48k steps (buckets under 64 steps) read the chunks: compaction keeps those
# few rows, and a finer level cost every ingested batch more rollup rows than all others together.
LEVELS = (64, 256, 1024, 4096)
FANOUT = 4
assert all(b == a * FANOUT for a, b in zip(LEVELS, LEVELS[1:], strict=False))

CHUNK = "metrics_metricchunk"
SERIES = "metrics_metricseries"
ROLLUP = "metrics_metricrollup"
ATTEMPT = "metrics_metricattempt"
STREAM = "metrics_metricstream"


@dataclass(frozen=True)
class Columns:
    """A deduplicated batch as parallel columns; `values` holds None where `specials` is not 0."""

    keys: list[str]
    steps: list[int]
    values: list[float | None]
    specials: list[int]
    times: list[float]


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def _raw_pg_cursor():
    """psycopg's own cursor on Django's connection (same transaction): server-side binding sends
    arrays in binary, where Django's client-side cursor would render them as SQL text."""
    import psycopg

    connection.ensure_connection()
    return psycopg.Cursor(connection.connection)


def next_seq(run_id: int) -> int:
    """Take the run's next batch number; the row stays locked until the batch commits."""
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {STREAM} (run_id, last_seq) VALUES (%s, 1) "
            f"ON CONFLICT (run_id) DO UPDATE SET last_seq = {STREAM}.last_seq + 1 RETURNING last_seq",
            [run_id],
        )
        return cur.fetchone()[0]


def last_seq(run_id: int) -> int:
    with connection.cursor() as cur:
        cur.execute(f"SELECT last_seq FROM {STREAM} WHERE run_id = %s", [run_id])
        row = cur.fetchone()
    return row[0] if row else 0


def note_attempt_start(run_id: int, attempt: int, min_step: int, seq: int) -> bool:
    """Record where `attempt` starts; True when that start is new or moved earlier."""
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {ATTEMPT} (run_id, attempt, start_step, seq) VALUES (%s, %s, %s, %s) "
            f"ON CONFLICT (run_id, attempt) DO UPDATE SET start_step = excluded.start_step, seq = excluded.seq "
            f"WHERE {ATTEMPT}.start_step > excluded.start_step RETURNING start_step",
            [run_id, attempt, min_step, seq],
        )
        return cur.fetchone() is not None


def supersede(run_id: int, attempt: int, from_step: int) -> int:
    """Mark older attempts' live points at or after `from_step` superseded (a chunk that straddles
    the step is split); returns how many points that was."""
    from orchestrator.metrics.models import MetricChunk

    whole, count = [], 0
    for chunk in MetricChunk.objects.filter(run_id=run_id, superseded=False, attempt__lt=attempt,
                                            last_step__gte=from_step):
        if chunk.first_step >= from_step:
            whole.append(chunk.pk)
            count += chunk.n
            continue
        points = _points_of(chunk)
        later = points.steps >= from_step
        _rewrite(chunk, points.take(~later))
        _new_chunk(run_id, chunk.key, chunk.attempt, chunk.seq, points.take(later), superseded=True).save()
        count += int(later.sum())
    MetricChunk.objects.filter(pk__in=whole).update(superseded=True)
    return count


def keys_already_stored(run_id: int, first_steps: dict[str, int]) -> dict[str, int]:
    """{key: max_span} of a batch's keys that reach back to or before their last stored step: a
    re-post, a backfill or another writer's steps behind the head, where the batch may meet stored
    points. The other keys only append."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT key, last_step, max_span FROM {SERIES} WHERE run_id = %s AND key IN "
                    f"({', '.join(['%s'] * len(first_steps))})", [run_id, *first_steps])
        return {key: span for key, last, span in cur.fetchall() if first_steps[key] <= last}


def remove_steps(run_id: int, incoming: dict[str, Points], spans: dict[str, int]) -> dict[str, Points]:
    """Take the steps about to be re-posted out of the live chunks that hold them, so that a
    (run, key, step) is live once and its last post wins; returns the points taken out, by key.

    A chunk that holds a step in [first, last] ends in [first, last + span] (span: the key's
    widest chunk), so the indexed scan reads the chunks near the batch, not the whole series."""
    from orchestrator.metrics.models import MetricChunk

    if not incoming:
        return {}
    overlap = Q()
    for key, points in incoming.items():
        first, last = int(points.steps[0]), int(points.steps[-1])
        overlap |= Q(key=key, last_step__gte=first, last_step__lte=last + spans.get(key, 0), first_step__lte=last)
    emptied, taken = [], {}
    for chunk in MetricChunk.objects.filter(overlap, run_id=run_id, superseded=False):
        points = _points_of(chunk)
        drop = np.isin(points.steps, incoming[chunk.key].steps, assume_unique=True)
        if not drop.any():
            continue
        taken.setdefault(chunk.key, []).append(points.take(drop))
        if drop.all():
            emptied.append(chunk.pk)
        else:
            _rewrite(chunk, points.take(~drop))
    MetricChunk.objects.filter(pk__in=emptied).delete()
    return {key: Points.join(parts) for key, parts in taken.items()}


def insert_chunks(run_id: int, attempt: int, seq: int, series: dict[str, Points]) -> None:
    from orchestrator.metrics.models import MetricChunk

    if not is_postgres():
        MetricChunk.objects.bulk_create([_new_chunk(run_id, key, attempt, seq, pts) for key, pts in series.items()])
        return
    with _raw_pg_cursor() as cur, cur.copy(
            f"COPY {CHUNK} (run_id, key, attempt, seq, superseded, first_step, last_step, n, steps, values, "
            "specials, times, sum_value, n_finite) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["int8", "text", "int4", "int8", "bool", "int8", "int8", "int4", "bytea", "bytea", "bytea", "bytea",
                        "float8", "int4"])
        for key, points in series.items():
            copy.write_row((run_id, key, attempt, seq, False, *chunk_fields(points).values()))


def _new_chunk(run_id: int, key: str, attempt: int, seq: int, points: Points, *, superseded: bool = False):
    from orchestrator.metrics.models import MetricChunk

    return MetricChunk(run_id=run_id, key=key, attempt=attempt, seq=seq, superseded=superseded,
                       **chunk_fields(points))


def chunk_fields(points: Points) -> dict:
    """The stored fields of a chunk holding `points`, in the order COPY writes them."""
    finite = points.specials == 0
    return {"first_step": int(points.steps[0]), "last_step": int(points.steps[-1]), "n": len(points), **pack(points),
            "sum_value": float(points.values[finite].sum()), "n_finite": int(finite.sum())}


def _points_of(chunk) -> Points:
    return unpack(chunk.steps, chunk.values, chunk.specials, chunk.times)


def _rewrite(chunk, points: Points) -> None:
    """Store a chunk with fewer points (never none: callers delete emptied chunks)."""
    fields = chunk_fields(points)
    for field, value in fields.items():
        setattr(chunk, field, value)
    chunk.save(update_fields=list(fields))


# A trainer posting every step or two leaves chunks of a few points; compaction merges those.
COMPACT_TARGET = 1024


def compact_chunks(run_id: int, *, keep_batches: int, target: int = COMPACT_TARGET) -> int:
    """Merge a run's small live chunks of the same key and attempt, in step order, into chunks of
    up to `target` points; returns how many chunks that removed. Batches among the run's last
    `keep_batches` are left alone: a reconnecting live chart replays those by their numbers.
    Takes the run's batch lock, so it never interleaves with an ingestion."""
    from orchestrator.metrics.models import MetricChunk, MetricStream

    with transaction.atomic():
        stream = MetricStream.objects.select_for_update().filter(run_id=run_id).first()
        if stream is None:
            return 0
        small = (MetricChunk.objects.filter(run_id=run_id, superseded=False, seq__lte=stream.last_seq - keep_batches,
                                            n__lt=target).order_by("key", "attempt", "first_step"))
        removed, parts, size = 0, [], 0
        for chunk in small.iterator(chunk_size=2000):
            if parts and ((chunk.key, chunk.attempt) != (parts[0].key, parts[0].attempt) or size + chunk.n > target):
                removed += _merge(run_id, parts)
                parts, size = [], 0
            parts.append(chunk)
            size += chunk.n
        return removed + _merge(run_id, parts)


def _merge(run_id: int, parts: list) -> int:
    """Replace chunks of one key and attempt by one chunk that holds all their points."""
    from orchestrator.metrics.models import MetricChunk

    if len(parts) < 2:
        return 0
    points = Points.join([_points_of(c) for c in parts])
    _new_chunk(run_id, parts[0].key, parts[0].attempt, max(c.seq for c in parts), points).save()
    MetricChunk.objects.filter(pk__in=[c.pk for c in parts]).delete()
    note_span(run_id, parts[0].key, int(points.steps[-1] - points.steps[0]))
    return len(parts) - 1


# --- per-key summaries ---------------------------------------------------------------------------

def _keep(old: str, new: str, take_new_if: str) -> str:
    return f"CASE WHEN {take_new_if} THEN {new} ELSE {old} END"


def upsert_series(run_id: int, summaries: Iterable[tuple], *, cursor=None) -> None:
    """Fold per-key (key, first, last_step, last_value, last_special, min, max, count, span) of
    points new to their keys (batches.key_summaries) into the stored summaries, whatever their
    steps: the later last point wins, extremes and counts combine. Portable SQL (PostgreSQL and
    SQLite)."""
    t = SERIES
    newer = f"excluded.last_step >= {t}.last_step"
    lower = f"excluded.min_value IS NOT NULL AND ({t}.min_value IS NULL OR excluded.min_value < {t}.min_value)"
    higher = f"excluded.max_value IS NOT NULL AND ({t}.max_value IS NULL OR excluded.max_value > {t}.max_value)"
    summaries = list(summaries)
    if not summaries:
        return
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 0)"] * len(summaries))
    sql = (
        f"INSERT INTO {t} (run_id, key, first_step, last_step, last_value, last_special, min_value, max_value, "
        f"count, max_span, revision) VALUES {values} ON CONFLICT (run_id, key) DO UPDATE SET "
        f"first_step = {_keep(f'{t}.first_step', 'excluded.first_step', f'excluded.first_step < {t}.first_step')}, "
        f"last_value = {_keep(f'{t}.last_value', 'excluded.last_value', newer)}, "
        f"last_special = {_keep(f'{t}.last_special', 'excluded.last_special', newer)}, "
        f"last_step = {_keep(f'{t}.last_step', 'excluded.last_step', newer)}, "
        f"min_value = {_keep(f'{t}.min_value', 'excluded.min_value', lower)}, "
        f"max_value = {_keep(f'{t}.max_value', 'excluded.max_value', higher)}, "
        f"count = {t}.count + excluded.count, revision = {t}.revision + 1, "
        f"max_span = {_keep(f'{t}.max_span', 'excluded.max_span', f'excluded.max_span > {t}.max_span')}"
    )
    params = [v for row in summaries for v in (run_id, *row)]
    if cursor is not None:  # a psycopg cursor of the ingest pipeline
        cursor.execute(sql, params)
        return
    with connection.cursor() as cur:
        cur.execute(sql, params)


def note_span(run_id: int, key: str, span: int) -> None:
    """Widen a key's max_span for a chunk that compaction made."""
    with connection.cursor() as cur:
        cur.execute(f"UPDATE {SERIES} SET max_span = %s WHERE run_id = %s AND key = %s AND max_span < %s",
                    [span, run_id, key, span])


def rebuild_series(run_id: int, keys: Iterable[str] | None = None) -> None:
    """Recompute the summaries of a run's keys (all of them by default) from their live points."""
    from orchestrator.metrics import batches
    from orchestrator.metrics.models import MetricChunk, MetricSeries

    keys = None if keys is None else list(keys)
    stale = MetricSeries.objects.filter(run_id=run_id)
    stale = stale if keys is None else stale.filter(key__in=keys)
    stale.delete()
    series = live_series(run_id, keys)
    if not series:
        return
    upsert_series(run_id, batches.key_summaries(batches.from_points(series)))
    # key_summaries' span is the whole series'; the overlap bound needs the widest chunk's
    chunks = MetricChunk.objects.filter(run_id=run_id, superseded=False, key__in=list(series))
    for key, span in chunks.values("key").annotate(span=Max(F("last_step") - F("first_step"))).values_list("key", "span"):
        MetricSeries.objects.filter(run_id=run_id, key=key).update(max_span=span)


def refresh_series_from_rollups(run_id: int, keys: list[str]) -> None:
    """Recompute the extremes, count and last point of keys whose stored values a re-post changed,
    from their coarsest rollups (PostgreSQL; a few rows per 4,096 steps, not the points)."""
    with _raw_pg_cursor() as cur:
        cur.execute(
            f"UPDATE {SERIES} s SET min_value = a.mn, max_value = a.mx, count = a.n, revision = s.revision + 1, "
            "last_step = (a.last)[1]::int8, "
            "last_value = (a.last)[2], last_special = (a.last)[3]::int2 "
            "FROM (SELECT key, min(min_value) AS mn, max(max_value) AS mx, sum(n) AS n, "
            "max(ARRAY[last_step, last_value, last_special]) AS last "
            f"FROM {ROLLUP} WHERE run_id = %s AND width = %s AND key = ANY(%s) GROUP BY key) a "
            "WHERE s.run_id = %s AND s.key = a.key",
            [run_id, LEVELS[-1], keys, run_id])


# --- rollups (PostgreSQL) -----------------------------------------------------------------------

_ROLLUP_COLUMNS = ("run_id, key, width, bucket, n, min_value, min_step, max_value, max_step, "
                   "last_step, last_value, last_special, last_time, special_step, special_kind")


def _merged(column: str, take_new_if: str) -> str:
    return f"{column} = CASE WHEN {take_new_if} THEN excluded.{column} ELSE r.{column} END"


# Order-independent, so a batch behind a key's head merges like one that appends: counts add, the
# lower min (ties: the earlier step) and higher max win, the later last point and the later
# non-finite point win. The batch's points must be new to their keys (re-posted steps that
# change a value go through rebuild_rollups instead).
MERGE_ROLLUPS = (
    f"INSERT INTO {ROLLUP} AS r ({_ROLLUP_COLUMNS}) SELECT %s, u.* FROM unnest("
    "%b::text[], %b::int4[], %b::int8[], %b::int4[], %b::float8[], %b::int8[], %b::float8[], %b::int8[], "
    "%b::int8[], %b::float8[], %b::int2[], %b::float8[], %b::int8[], %b::int2[]) AS u "
    "ON CONFLICT (run_id, key, width, bucket) DO UPDATE SET n = r.n + excluded.n, "
    + ", ".join([
        _merged("min_value", lower := "excluded.min_value IS NOT NULL AND (r.min_value IS NULL OR excluded.min_value < r.min_value"
                                      " OR (excluded.min_value = r.min_value AND excluded.min_step < r.min_step))"),
        _merged("min_step", lower),
        _merged("max_value", higher := "excluded.max_value IS NOT NULL AND (r.max_value IS NULL OR excluded.max_value > r.max_value"
                                       " OR (excluded.max_value = r.max_value AND excluded.max_step < r.max_step))"),
        _merged("max_step", higher),
        *(_merged(c, "excluded.last_step > r.last_step") for c in ("last_step", "last_value", "last_special", "last_time")),
        _merged("special_step", later := "excluded.special_step IS NOT NULL AND (r.special_step IS NULL"
                                         " OR excluded.special_step > r.special_step)"),
        _merged("special_kind", later),
    ])
)


def merge_rollups(run_id: int, rows) -> None:
    """Fold a batch's own bucket aggregates (batches.rollup_rows) of points new to their keys into
    the stored rollups: one array upsert, no re-reading of stored points."""
    with _raw_pg_cursor() as cur:
        cur.execute(MERGE_ROLLUPS, [run_id, *rows.columns()])


# Rebuilds read at most this many steps of a run at a time (a multiple of every level).
REBUILD_SLICE = LEVELS[-1] * 1024


def rebuild_rollups(run_id: int, from_step: int = 0, to_step: int | None = None,
                    keys: Iterable[str] | None = None) -> None:
    """Recompute a run's rollup buckets (of `keys`, or all) over [from_step, to_step], widened to
    whole buckets of the coarsest level so that every level is rebuilt from all its points."""
    from orchestrator.metrics import batches
    from orchestrator.metrics.models import MetricChunk, MetricRollup

    top = LEVELS[-1]
    lo = from_step // top * top
    keys = None if keys is None else list(keys)
    if to_step is None:  # to the end, past the last live point: older buckets there may now be empty
        chunks = MetricChunk.objects.filter(run_id=run_id, superseded=False)
        chunks = chunks if keys is None else chunks.filter(key__in=keys)
        rollups = MetricRollup.objects.filter(run_id=run_id, width=top)
        rollups = rollups if keys is None else rollups.filter(key__in=keys)
        to_step = max(lo, chunks.aggregate(last=Max("last_step"))["last"] or 0,
                      (rollups.aggregate(last=Max("bucket"))["last"] or 0) * top)
    hi = to_step // top * top + top - 1
    with _raw_pg_cursor() as cur:
        cur.execute(f"DELETE FROM {ROLLUP} WHERE run_id = %s AND bucket >= %s / width AND bucket <= %s / width"
                    + ("" if keys is None else " AND key = ANY(%s)"),
                    [run_id, lo, hi, *([] if keys is None else [keys])])
    for start in range(lo, hi + 1, REBUILD_SLICE):
        series = live_series(run_id, keys, lo=start, hi=min(hi, start + REBUILD_SLICE - 1))
        if series:  # the buckets were just deleted, so the merge only inserts
            merge_rollups(run_id, batches.rollup_rows(batches.from_points(series), LEVELS))
