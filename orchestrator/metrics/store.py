"""Writing metric storage: chunks of points, supersession, per-key summaries and rollups.

Every function runs inside the caller's transaction, under the run's batch lock (next_seq), so a
run's writes never interleave. A batch is stored as one chunk per key (models.MetricChunk);
summaries and, for batches that only append, rollups are folded in from the batch's own numpy
aggregates (batches.py), so the usual batch costs a few statements whatever its size. Re-posted
steps and restarts recompute what they touch from the stored chunks. SQLite, used by the demo,
has no rollups (its charts read chunks).
"""
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from django.db import connection, transaction
from django.db.models import Max, Q

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


def keys_already_stored(run_id: int, first_steps: dict[str, int]) -> set[str]:
    """Keys of a batch that reach back to or before their last stored step: a re-post or a
    backfill, where the batch may replace stored points. The other keys only append."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT key, last_step FROM {SERIES} WHERE run_id = %s AND key IN ({', '.join(['%s'] * len(first_steps))})",
                    [run_id, *first_steps])
        return {key for key, last in cur.fetchall() if first_steps[key] <= last}


def remove_steps(run_id: int, incoming: dict[str, Points]) -> None:
    """Take the steps about to be re-posted out of the live chunks that hold them, so that a
    (run, key, step) is live once and its last post wins."""
    from orchestrator.metrics.models import MetricChunk

    if not incoming:
        return
    overlap = Q()
    for key, points in incoming.items():
        overlap |= Q(key=key, last_step__gte=int(points.steps[0]), first_step__lte=int(points.steps[-1]))
    emptied = []
    for chunk in MetricChunk.objects.filter(overlap, run_id=run_id, superseded=False):
        points = _points_of(chunk)
        drop = np.isin(points.steps, incoming[chunk.key].steps)
        if drop.all():
            emptied.append(chunk.pk)
        elif drop.any():
            _rewrite(chunk, points.take(~drop))
    MetricChunk.objects.filter(pk__in=emptied).delete()


def insert_chunks(run_id: int, attempt: int, seq: int, series: dict[str, Points]) -> None:
    from orchestrator.metrics.models import MetricChunk

    if not is_postgres():
        MetricChunk.objects.bulk_create([_new_chunk(run_id, key, attempt, seq, pts) for key, pts in series.items()])
        return
    with _raw_pg_cursor() as cur, cur.copy(
            f"COPY {CHUNK} (run_id, key, attempt, seq, superseded, first_step, last_step, n, steps, values, "
            "specials, times) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["int8", "text", "int4", "int8", "bool", "int8", "int8", "int4", "bytea", "bytea", "bytea", "bytea"])
        for key, points in series.items():
            copy.write_row((run_id, key, attempt, seq, False, *_chunk_fields(points).values()))


def _new_chunk(run_id: int, key: str, attempt: int, seq: int, points: Points, *, superseded: bool = False):
    from orchestrator.metrics.models import MetricChunk

    return MetricChunk(run_id=run_id, key=key, attempt=attempt, seq=seq, superseded=superseded,
                       **_chunk_fields(points))


def _chunk_fields(points: Points) -> dict:
    """The stored fields of a chunk holding `points`, in the order COPY writes them."""
    return {"first_step": int(points.steps[0]), "last_step": int(points.steps[-1]), "n": len(points), **pack(points)}


def _points_of(chunk) -> Points:
    return unpack(chunk.steps, chunk.values, chunk.specials, chunk.times)


def _rewrite(chunk, points: Points) -> None:
    """Store a chunk with fewer points (never none: callers delete emptied chunks)."""
    fields = _chunk_fields(points)
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
    return len(parts) - 1


# --- per-key summaries ---------------------------------------------------------------------------

def _keep(old: str, new: str, take_new_if: str) -> str:
    return f"CASE WHEN {take_new_if} THEN {new} ELSE {old} END"


def upsert_series(run_id: int, summaries: Iterable[tuple]) -> None:
    """Fold a batch's per-key (key, first, last_step, last_value, last_special, min, max) into the
    stored summaries. Portable SQL: the same statement runs on PostgreSQL and SQLite."""
    t = SERIES
    newer = f"excluded.last_step >= {t}.last_step"
    lower = f"excluded.min_value IS NOT NULL AND ({t}.min_value IS NULL OR excluded.min_value < {t}.min_value)"
    higher = f"excluded.max_value IS NOT NULL AND ({t}.max_value IS NULL OR excluded.max_value > {t}.max_value)"
    summaries = list(summaries)
    if not summaries:
        return
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(summaries))
    sql = (
        f"INSERT INTO {t} (run_id, key, first_step, last_step, last_value, last_special, min_value, max_value) "
        f"VALUES {values} ON CONFLICT (run_id, key) DO UPDATE SET "
        f"first_step = {_keep(f'{t}.first_step', 'excluded.first_step', f'excluded.first_step < {t}.first_step')}, "
        f"last_value = {_keep(f'{t}.last_value', 'excluded.last_value', newer)}, "
        f"last_special = {_keep(f'{t}.last_special', 'excluded.last_special', newer)}, "
        f"last_step = {_keep(f'{t}.last_step', 'excluded.last_step', newer)}, "
        f"min_value = {_keep(f'{t}.min_value', 'excluded.min_value', lower)}, "
        f"max_value = {_keep(f'{t}.max_value', 'excluded.max_value', higher)}"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [v for row in summaries for v in (run_id, *row)])


def rebuild_series(run_id: int, keys: Iterable[str] | None = None) -> None:
    """Recompute the summaries of a run's keys (all of them by default) from their live points."""
    from orchestrator.metrics import batches
    from orchestrator.metrics.models import MetricSeries

    keys = None if keys is None else list(keys)
    stale = MetricSeries.objects.filter(run_id=run_id)
    stale = stale if keys is None else stale.filter(key__in=keys)
    stale.delete()
    series = live_series(run_id, keys)
    if series:
        upsert_series(run_id, batches.key_summaries(batches.from_points(series)))


# --- rollups (PostgreSQL) -----------------------------------------------------------------------

_ROLLUP_COLUMNS = ("run_id, key, width, bucket, n, min_value, min_step, max_value, max_step, "
                   "last_step, last_value, last_special, last_time, special_step, special_kind")


def _merged(column: str, take_new_if: str) -> str:
    return f"{column} = CASE WHEN {take_new_if} THEN excluded.{column} ELSE r.{column} END"


# Only for batches that append: their steps come after every stored point of their keys, so the
# new last point always wins and min/max ties stay with the stored (earlier) point.
_MERGE_ROLLUPS = (
    f"INSERT INTO {ROLLUP} AS r ({_ROLLUP_COLUMNS}) SELECT %s, u.* FROM unnest("
    "%b::text[], %b::int4[], %b::int8[], %b::int4[], %b::float8[], %b::int8[], %b::float8[], %b::int8[], "
    "%b::int8[], %b::float8[], %b::int2[], %b::float8[], %b::int8[], %b::int2[]) AS u "
    "ON CONFLICT (run_id, key, width, bucket) DO UPDATE SET n = r.n + excluded.n, "
    + ", ".join([
        _merged("min_value", lower := "excluded.min_value IS NOT NULL AND (r.min_value IS NULL OR excluded.min_value < r.min_value)"),
        _merged("min_step", lower),
        _merged("max_value", higher := "excluded.max_value IS NOT NULL AND (r.max_value IS NULL OR excluded.max_value > r.max_value)"),
        _merged("max_step", higher),
        *(f"{c} = excluded.{c}" for c in ("last_step", "last_value", "last_special", "last_time")),
        _merged("special_step", "excluded.special_step IS NOT NULL"),
        _merged("special_kind", "excluded.special_kind IS NOT NULL"),
    ])
)


def merge_rollups(run_id: int, rows) -> None:
    """Fold an appending batch's own bucket aggregates (batches.rollup_rows) into the stored
    rollups: one array upsert, no re-reading of stored points."""
    with _raw_pg_cursor() as cur:
        cur.execute(_MERGE_ROLLUPS, [run_id, *rows.columns()])


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
