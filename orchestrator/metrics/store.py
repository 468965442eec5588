"""Metric storage's statements: chunks of points, per-key summaries and rollups, and the rare work
(supersession at a restart, rebuilds, compaction).

Each statement function takes `db` (db.Statements) and returns at once, so the write path
(pipeline.py) queues them in its round trips; the same SQL runs on PostgreSQL and SQLite, only
the row sources differ (rows.py). Everything runs in the caller's transaction, under the run's
batch lock (next_seq), so a run's writes never interleave. SQLite, used by the demo, has no
rollups (its charts read chunks).

Rollups are stored as partial buckets: a batch inserts its own aggregates for each level, and a
bucket is the merge of its rows (counts add; the lower min, the higher max, each tie to the
earlier step; the later last point; the later non-finite point). Chart reads merge rows anyway
(they group buckets into wider ones), and compaction merges each bucket's partials into one row.
Inserting instead of updating keeps a batch's cost flat as the series grows: no row is rewritten
by every batch, so nothing waits on vacuum (the test machines' PostgreSQL runs without
autovacuum, and each upsert of a hot bucket left a dead version behind).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from django.db import transaction

from orchestrator.experiments.models import Run
from orchestrator.metrics import batches
from orchestrator.metrics.batches import SortedBatch
from orchestrator.metrics.chunks import (
    Columns,  # noqa: F401 (schemas and live import it from here)
    Points,
    live_series,
    pack,
    unpack,
)
from orchestrator.metrics.db import Statements, direct, is_postgres  # noqa: F401 (is_postgres: selectors)
from orchestrator.metrics.models import MetricChunk, MetricRollup, MetricStream
from orchestrator.metrics.rows import Rows

# Rollup bucket widths in steps, finest first; every level is aggregated from the points.
# Fanout 4 keeps a chart's read within 4 rollup buckets per drawn bucket (compare pages read many runs).
# Charts of fewer than ~48k steps (buckets under 64 steps) read the chunks: compaction keeps those
# few rows, and a finer level cost every ingested batch more rollup rows than all others together.
LEVELS = (64, 256, 1024, 4096)
FANOUT = 4
assert all(b == a * FANOUT for a, b in zip(LEVELS, LEVELS[1:], strict=False))

CHUNK = MetricChunk._meta.db_table
SERIES = "metrics_metricseries"
ROLLUP = MetricRollup._meta.db_table
ATTEMPT = "metrics_metricattempt"
STREAM = MetricStream._meta.db_table
RUN = Run._meta.db_table


def _nan_null(expr: str, db: Statements) -> str:
    """A float column where NaN stands for NULL (SQLite already stores a bound NaN as NULL)."""
    return f"NULLIF({expr}, 'NaN'::float8)" if db.postgres else expr


def _rows(db: Statements, columns, data) -> tuple[str, list]:
    return Rows(columns, data, postgres=db.postgres).with_clause()


@dataclass(frozen=True)
class Prepared:
    """The row sources of a batch's chunks, summaries and rollups, built before the run's lock is
    taken (a batch's numpy work and packing stay out of the run's serial section)."""

    chunks: tuple[str, list]
    series: tuple[str, list]
    rollups: tuple[str, list] | None


def prepare(db: Statements, batch: SortedBatch) -> Prepared:
    return Prepared(
        chunks=_rows(db, batches.CHUNK_COLUMNS, batches.chunk_columns(batch)),
        series=_rows(db, batches.SUMMARY_COLUMNS, batches.key_summaries(batch)),
        rollups=_rows(db, batches.ROLLUP_COLUMNS, batches.rollup_columns(batch, LEVELS)) if db.postgres else None,
    )


# --- the run's batch lock, attempts, progress ------------------------------------------------------

NEXT_SEQ = (
    f"INSERT INTO {STREAM} (run_id, last_seq) VALUES (%s, 1) ON CONFLICT (run_id) "
    f"DO UPDATE SET last_seq = {STREAM}.last_seq + 1 RETURNING last_seq"
)
# After NEXT_SEQ in the same transaction, so the subquery reads this batch's number.
ATTEMPT_START = (
    f"INSERT INTO {ATTEMPT} (run_id, attempt, start_step, seq) VALUES (%s, %s, %s, "
    f"(SELECT last_seq FROM {STREAM} WHERE run_id = %s)) "
    f"ON CONFLICT (run_id, attempt) DO UPDATE SET start_step = excluded.start_step, seq = excluded.seq "
    f"WHERE {ATTEMPT}.start_step > excluded.start_step RETURNING start_step"
)
PROGRESS = f"UPDATE {RUN} SET step = %s WHERE id = %s AND step < %s"


def next_seq(db: Statements, run_id: int):
    """Take the run's next batch number; the stream row stays locked until the batch commits."""
    return db.execute(NEXT_SEQ, [run_id])


def note_attempt_start(db: Statements, run_id: int, attempt: int, min_step: int):
    """Record where `attempt` starts; a row when that start is new or moved earlier."""
    return db.execute(ATTEMPT_START, [run_id, attempt, min_step, run_id])


def note_progress(db: Statements, run_id: int, step: int):
    return db.execute(PROGRESS, [step, run_id, step])


def last_seq(run_id: int) -> int:
    row = direct().fetch(f"SELECT last_seq FROM {STREAM} WHERE run_id = %s", [run_id])
    return row[0][0] if row else 0


# --- chunks ------------------------------------------------------------------------------------


def _key_ranges(db: Statements, batch: SortedBatch) -> tuple[str, list]:
    """b(key, lo, hi): each key's first and last step in the batch."""
    starts = batch.key_starts()
    ends = np.r_[starts[1:], len(batch.steps)] - 1
    return _rows(
        db,
        (("key", "text"), ("lo", "int8"), ("hi", "int8")),
        [[batch.key_names[i] for i in batch.key_index[starts].tolist()], batch.steps[starts], batch.steps[ends]],
    )


def _near_ranges(db: Statements, run_id: int, batch: SortedBatch) -> tuple[str, list]:
    """b(key, lo, hi) and r(key, lo, hi, top): a chunk that holds a step in a key's [lo, hi] ends in
    [lo, top], top = hi + the key's widest chunk (the series' max_span; NULL for a key not stored
    yet, which no chunk then matches)."""
    with_b, params = _key_ranges(db, batch)
    # max_span by one index probe per key: a join scanned every stored version of the run's series
    # rows (each batch's upsert leaves one behind until vacuum), a cost that grew with the series
    top = f"b.hi + (SELECT s.max_span FROM {SERIES} s WHERE s.run_id = %s AND s.key = b.key)"
    return with_b + f", r AS (SELECT b.key, b.lo, b.hi, {top} AS top FROM b) ", [*params, run_id]


_NEAR_WHERE = (
    "c.run_id = %s AND NOT c.superseded AND c.key = r.key AND c.last_step >= r.lo AND c.last_step <= r.top "
    "AND c.first_step <= r.hi"
)


def _near(db: Statements) -> str:
    """FROM r and c, the live chunks that may hold a step of the batch (after _near_ranges). On
    PostgreSQL a LATERAL subquery, so both ends of [lo, top] are the chunk index's conditions
    whatever the planner estimates: as a join (the tables never analyzed without autovacuum) it
    hashed every chunk of the run, or bounded its index scan by lo alone, and a batch behind a
    key's head read every chunk up to the head. SQLite only joins by nested loops over the index."""
    if db.postgres:
        # OFFSET 0 keeps the planner from flattening the subquery back into a join
        return (
            f"FROM r CROSS JOIN LATERAL (SELECT c.id, c.key, c.steps, c.seq FROM {CHUNK} c WHERE {_NEAR_WHERE} "
            "OFFSET 0) c"
        )
    return f"FROM r JOIN {CHUNK} c ON {_NEAR_WHERE}"


def near_chunks(db: Statements, run_id: int, batch: SortedBatch):
    """(id, key, steps) of the live chunks that may hold a step of the batch: the indexed scan reads
    the chunks near the batch, not the series; a key that appends finds none."""
    with_r, params = _near_ranges(db, run_id, batch)
    return db.execute(with_r + f"SELECT c.id, c.key, c.steps {_near(db)}", [*params, run_id])


def chunks_by_id(db: Statements, ids: Iterable[int]) -> list[tuple]:
    """(id, key, attempt, seq, first_step, Points) of chunks."""
    ids = list(ids)
    if not ids:
        return []
    rows = db.fetch(
        f'SELECT id, key, attempt, seq, first_step, steps, "values", specials, times FROM {CHUNK} '
        f"WHERE id IN ({', '.join(['%s'] * len(ids))})",
        ids,
    )
    return [(cid, key, attempt, seq, first, unpack(*blobs)) for cid, key, attempt, seq, first, *blobs in rows]


def insert_chunks(
    db: Statements,
    run_id: int,
    attempt: int,
    seq: int | None,
    batch: SortedBatch | None,
    *,
    superseded: bool = False,
    prepared: Prepared | None = None,
):
    """One chunk per key of the batch (or of the batch `prepared` was built from); seq None: the
    number this transaction's NEXT_SEQ took."""
    with_b, params = prepared.chunks if prepared else _rows(db, batches.CHUNK_COLUMNS, batches.chunk_columns(batch))
    seq_sql, seq_params = (
        ("%s", [seq]) if seq is not None else (f"(SELECT last_seq FROM {STREAM} WHERE run_id = %s)", [run_id])
    )
    return db.execute(
        with_b + f"INSERT INTO {CHUNK} (run_id, key, attempt, seq, superseded, first_step, last_step, n, steps, "
        f'"values", specials, times, sum_value, n_finite) SELECT %s, key, %s, {seq_sql}, %s, first_step, last_step, n, '
        'steps, "values", specials, times, sum_value, n_finite FROM b',
        [*params, run_id, attempt, *seq_params, superseded],
    )


def committed_seq(db: Statements, run_id: int):
    """The run's last committed batch number (no lock)."""
    return db.execute(f"SELECT last_seq FROM {STREAM} WHERE run_id = %s", [run_id])


class NearStored(Exception):
    """The guard of an append found what it must not: see guard_append."""


def guard_append(db: Statements, run_id: int, attempt: int, batch: SortedBatch, seen_seq: int):
    """Under the run's lock (after NEXT_SEQ and the attempt's start): fail the transaction (a
    division by zero, raised at the next sync as NearStored by the caller) when a batch committed
    after `seen_seq` stored a chunk whose step range meets the batch's (its steps were not checked),
    or when this batch starts a restart. Otherwise the append's unlocked check still holds: points
    only leave chunks after seen_seq, never arrive in older ones. Bounded like near_chunks (a chunk
    that meets [lo, hi] ends by hi + max_span), so it reads the chunks near the batch, not every
    later chunk of the key (without the bound its cost grew with the series)."""
    with_r, params = _near_ranges(db, run_id, batch)
    return db.execute(
        with_r + f"SELECT 1 / (CASE WHEN EXISTS (SELECT 1 {_near(db)} WHERE c.seq > %s) "
        f"OR EXISTS (SELECT 1 FROM {ATTEMPT} a WHERE a.run_id = %s AND a.attempt = %s AND a.attempt > 1 "
        f"AND a.seq = (SELECT last_seq FROM {STREAM} WHERE run_id = %s)) THEN 0 ELSE 1 END)",
        [*params, run_id, seen_seq, run_id, attempt, run_id],
    )


def rewrite_chunk(db: Statements, chunk_id: int, points: Points):
    """Store a chunk with fewer points (never none: callers delete emptied chunks)."""
    finite = points.specials == 0
    return db.execute(
        f'UPDATE {CHUNK} SET first_step = %s, last_step = %s, n = %s, steps = %s, "values" = %s, specials = %s, '
        "times = %s, sum_value = %s, n_finite = %s WHERE id = %s",
        [
            int(points.steps[0]),
            int(points.steps[-1]),
            len(points),
            *pack(points).values(),
            float(points.values[finite].sum()),
            int(finite.sum()),
            chunk_id,
        ],
    )


def delete_chunks(db: Statements, ids: list[int]):
    if ids:
        return db.execute(f"DELETE FROM {CHUNK} WHERE id IN ({', '.join(['%s'] * len(ids))})", ids)
    return None


def supersede(db: Statements, run_id: int, attempt: int, from_step: int) -> int:
    """Mark older attempts' live points at or after `from_step` superseded (a chunk that straddles
    the step is split); returns how many points that was."""
    rows = db.fetch(
        f"SELECT id, n, first_step FROM {CHUNK} WHERE run_id = %s AND NOT superseded AND attempt < %s "
        "AND last_step >= %s",
        [run_id, attempt, from_step],
    )
    whole = [cid for cid, _, first in rows if first >= from_step]
    count = sum(n for _, n, first in rows if first >= from_step)
    if whole:
        db.execute(f"UPDATE {CHUNK} SET superseded = %s WHERE id IN ({', '.join(['%s'] * len(whole))})", [True, *whole])
    for cid, key, old_attempt, seq, _, points in chunks_by_id(db, [cid for cid, _, first in rows if first < from_step]):
        later = points.steps >= from_step
        rewrite_chunk(db, cid, points.take(~later))
        insert_chunks(db, run_id, old_attempt, seq, batches.from_points({key: points.take(later)}), superseded=True)
        count += int(later.sum())
    return count


# --- per-key summaries ---------------------------------------------------------------------------


def _keep(old: str, new: str, take_new_if: str) -> str:
    return f"CASE WHEN {take_new_if} THEN {new} ELSE {old} END"


def _fold_series_sql(db: Statements) -> str:
    t = SERIES
    newer = f"excluded.last_step >= {t}.last_step"
    lower = f"excluded.min_value IS NOT NULL AND ({t}.min_value IS NULL OR excluded.min_value < {t}.min_value)"
    higher = f"excluded.max_value IS NOT NULL AND ({t}.max_value IS NULL OR excluded.max_value > {t}.max_value)"
    return (
        f"INSERT INTO {t} (run_id, key, first_step, last_step, last_value, last_special, min_value, max_value, "
        f"count, max_span, revision) SELECT %s, key, first_step, last_step, {_nan_null('last_value', db)}, "
        f"last_special, {_nan_null('min_value', db)}, {_nan_null('max_value', db)}, count, span, 0 FROM b WHERE true "
        f"ON CONFLICT (run_id, key) DO UPDATE SET "
        f"first_step = {_keep(f'{t}.first_step', 'excluded.first_step', f'excluded.first_step < {t}.first_step')}, "
        f"last_value = {_keep(f'{t}.last_value', 'excluded.last_value', newer)}, "
        f"last_special = {_keep(f'{t}.last_special', 'excluded.last_special', newer)}, "
        f"last_step = {_keep(f'{t}.last_step', 'excluded.last_step', newer)}, "
        f"min_value = {_keep(f'{t}.min_value', 'excluded.min_value', lower)}, "
        f"max_value = {_keep(f'{t}.max_value', 'excluded.max_value', higher)}, "
        f"count = {t}.count + excluded.count, revision = {t}.revision + 1, "
        f"max_span = {_keep(f'{t}.max_span', 'excluded.max_span', f'excluded.max_span > {t}.max_span')}"
    )


def fold_series(
    db: Statements, run_id: int, batch: SortedBatch | None, *, count: bool = True, prepared: Prepared | None = None
):
    """Fold the summaries of points new to their keys into the stored ones, whatever their steps:
    the later last point wins, extremes and counts combine. count=False folds only the step range
    and last point (keys whose changed values are recomputed afterwards)."""
    if prepared:
        with_b, params = prepared.series
    else:
        columns = batches.key_summaries(batch)
        if not count:
            columns[7] = np.zeros(len(columns[7]), np.int64)
        with_b, params = _rows(db, batches.SUMMARY_COLUMNS, columns)
    return db.execute(with_b + _fold_series_sql(db), [*params, run_id])


def note_span(db: Statements, run_id: int, key: str, span: int):
    """Widen a key's max_span for a chunk that compaction made."""
    return db.execute(
        f"UPDATE {SERIES} SET max_span = %s WHERE run_id = %s AND key = %s AND max_span < %s", [span, run_id, key, span]
    )


def rebuild_series(run_id: int, keys: Iterable[str] | None = None, db: Statements | None = None) -> None:
    """Recompute the summaries of a run's keys (all of them by default) from their live points."""
    db = db or direct()
    keys = None if keys is None else list(keys)
    only = "" if keys is None else f" AND key IN ({', '.join(['%s'] * len(keys))})"
    db.execute(f"DELETE FROM {SERIES} WHERE run_id = %s" + only, [run_id, *(keys or [])])
    series = live_series(run_id, keys)
    if not series:
        return
    fold_series(db, run_id, batches.from_points(series))
    # the folded span is the whole series'; the overlap bound needs the widest chunk's
    for key, span in db.fetch(
        f"SELECT key, MAX(last_step - first_step) FROM {CHUNK} WHERE run_id = %s AND NOT superseded GROUP BY key",
        [run_id],
    ):
        if key in series:
            db.execute(f"UPDATE {SERIES} SET max_span = %s WHERE run_id = %s AND key = %s", [span, run_id, key])


def refresh_series_from_rollups(db: Statements, run_id: int, keys: list[str]):
    """Recompute the extremes, count and last point of keys whose stored values a re-post changed,
    from their coarsest rollups (PostgreSQL; a few rows per 4,096 steps, not the points)."""
    return db.execute(
        f"UPDATE {SERIES} s SET min_value = a.mn, max_value = a.mx, count = a.n, revision = s.revision + 1, "
        "last_step = (a.last)[1]::int8, last_value = (a.last)[2], last_special = (a.last)[3]::int2 "
        "FROM (SELECT key, min(min_value) AS mn, max(max_value) AS mx, sum(n) AS n, "
        "max(ARRAY[last_step, last_value, last_special]) AS last "
        f"FROM {ROLLUP} WHERE run_id = %s AND width = %s AND key = ANY(%s) GROUP BY key) a "
        "WHERE s.run_id = %s AND s.key = a.key",
        [run_id, LEVELS[-1], keys, run_id],
    )


# --- rollups (PostgreSQL) -----------------------------------------------------------------------

_ROLLUP_FIELDS = (
    "n, min_value, min_step, max_value, max_step, last_step, last_value, last_special, last_time, "
    "special_step, special_kind"
)


def insert_rollups(db: Statements, run_id: int, batch: SortedBatch | None, *, prepared: Prepared | None = None):
    """The batch's own buckets of every level, as partial rows (points new to their keys only:
    re-posted steps that change a value go through rebuild_rollups)."""
    with_b, params = (
        prepared.rollups if prepared else _rows(db, batches.ROLLUP_COLUMNS, batches.rollup_columns(batch, LEVELS))
    )
    return db.execute(
        with_b + f"INSERT INTO {ROLLUP} (run_id, key, width, bucket, {_ROLLUP_FIELDS}) SELECT %s, key, width, bucket, "
        "n, NULLIF(min_value, 'NaN'::float8), NULLIF(min_step, -1), NULLIF(max_value, 'NaN'::float8), "
        "NULLIF(max_step, -1), last_step, NULLIF(last_value, 'NaN'::float8), last_special, last_time, "
        "NULLIF(special_step, -1), NULLIF(special_kind, -1) FROM b",
        [*params, run_id],
    )


# The merge of a bucket's partial rows (the order-independent rules above), as selectors reads them.
MERGED_ROLLUPS = (
    "SELECT run_id, key, width, bucket, n::int4, mn[1], mn[2]::int8, mx[1], (-mx[2])::int8, last[1]::int8, "
    "last[2], last[3]::int2, last[4], sp[1]::int8, sp[2]::int2 FROM (SELECT run_id, key, width, bucket, sum(n) AS n, "
    "min(ARRAY[min_value, min_step]) FILTER (WHERE min_value IS NOT NULL) AS mn, "
    "max(ARRAY[max_value, -max_step]) FILTER (WHERE max_value IS NOT NULL) AS mx, "
    "max(ARRAY[last_step, last_value, last_special, last_time]) AS last, "
    "max(ARRAY[special_step, special_kind]) FILTER (WHERE special_step IS NOT NULL) AS sp "
    "FROM {source} GROUP BY run_id, key, width, bucket) g"
)


def merged_rollups(run_id: int) -> list[tuple]:
    """A run's rollup buckets, one merged row each: (key, width, bucket, n, min_value, min_step,
    max_value, max_step, last_step, last_value, last_special, last_time, special_step, special_kind)."""
    source = f"(SELECT * FROM {ROLLUP} WHERE run_id = %s) r"
    return sorted(row[1:] for row in direct().fetch(MERGED_ROLLUPS.format(source=source), [run_id]))


def merge_rollup_partials(db: Statements, run_id: int):
    """Replace each bucket's partial rows by their merge (compaction)."""
    return db.execute(
        f"WITH split AS (SELECT key, width, bucket FROM {ROLLUP} WHERE run_id = %s GROUP BY key, width, bucket "
        f"HAVING count(*) > 1), gone AS (DELETE FROM {ROLLUP} r USING split WHERE r.run_id = %s AND r.key = split.key "
        "AND r.width = split.width AND r.bucket = split.bucket RETURNING r.*) "
        f"INSERT INTO {ROLLUP} (run_id, key, width, bucket, {_ROLLUP_FIELDS}) " + MERGED_ROLLUPS.format(source="gone"),
        [run_id, run_id],
    )


# Rebuilds read at most this many steps of a run at a time (a multiple of every level).
REBUILD_SLICE = LEVELS[-1] * 1024


def rebuild_rollups(
    run_id: int,
    from_step: int = 0,
    to_step: int | None = None,
    keys: Iterable[str] | None = None,
    db: Statements | None = None,
) -> None:
    """Recompute a run's rollup buckets (of `keys`, or all) over [from_step, to_step], widened to
    whole buckets of the coarsest level so that every level is rebuilt from all its points."""
    db = db or direct()
    top = LEVELS[-1]
    lo = from_step // top * top
    keys = None if keys is None else list(keys)
    only = "" if keys is None else " AND key = ANY(%s)"
    extra = [] if keys is None else [keys]
    if to_step is None:  # to the end, past the last live point: older buckets there may now be empty
        [(last_chunk, last_bucket)] = db.fetch(
            f"SELECT (SELECT max(last_step) FROM {CHUNK} WHERE run_id = %s AND NOT superseded{only}), "
            f"(SELECT max(bucket) FROM {ROLLUP} WHERE run_id = %s AND width = %s{only})",
            [run_id, *extra, run_id, top, *extra],
        )
        to_step = max(lo, last_chunk or 0, (last_bucket or 0) * top)
    hi = to_step // top * top + top - 1
    db.execute(
        f"DELETE FROM {ROLLUP} WHERE run_id = %s AND bucket >= %s / width AND bucket <= %s / width" + only,
        [run_id, lo, hi, *extra],
    )
    start = lo
    while start is not None and start <= hi:
        end = min(hi, start + REBUILD_SLICE - 1)
        series = live_series(run_id, keys, lo=start, hi=end)
        if series:
            insert_rollups(db, run_id, batches.from_points(series))
            db.sync()
        # Steps are 64-bit and may leap (tokens seen): go straight to the next slice with points.
        [(following,)] = db.fetch(
            f"SELECT min(first_step) FROM {CHUNK} WHERE run_id = %s AND NOT superseded AND last_step > %s{only}",
            [run_id, end, *extra],
        )
        start = None if following is None else max(end + 1, following // REBUILD_SLICE * REBUILD_SLICE)


# --- compaction --------------------------------------------------------------------------------

# A trainer posting every step or two leaves chunks of a few points; compaction merges those.
COMPACT_TARGET = 1024


def compact_chunks(run_id: int, *, keep_batches: int, target: int = COMPACT_TARGET) -> int:
    """Merge a run's small live chunks of the same key and attempt, in step order, into chunks of
    up to `target` points, and each rollup bucket's partial rows into one; returns how many chunks
    that removed. Batches among the run's last `keep_batches` are left alone: a reconnecting live
    chart replays those by their numbers. Takes the run's batch lock, so it never interleaves with
    an ingestion."""
    with transaction.atomic():
        stream = MetricStream.objects.select_for_update().filter(run_id=run_id).first()
        if stream is None:
            return 0
        db = direct()
        if db.postgres:
            merge_rollup_partials(db, run_id)
        small = (
            MetricChunk.objects.filter(
                run_id=run_id, superseded=False, seq__lte=stream.last_seq - keep_batches, n__lt=target
            )
            .order_by("key", "attempt", "first_step")
            .values_list("pk", "key", "attempt", "seq", "n", "steps", "values", "specials", "times")
        )
        removed, parts, size = 0, [], 0
        for row in small.iterator(chunk_size=2000):
            if parts and ((row[1], row[2]) != (parts[0][1], parts[0][2]) or size + row[4] > target):
                removed += _merge(db, run_id, parts)
                parts, size = [], 0
            parts.append(row)
            size += row[4]
        return removed + _merge(db, run_id, parts)


def _merge(db: Statements, run_id: int, parts: list) -> int:
    """Replace chunks of one key and attempt by one chunk that holds all their points."""
    if len(parts) < 2:
        return 0
    key, attempt = parts[0][1], parts[0][2]
    points = Points.join([unpack(*row[5:]) for row in parts])
    insert_chunks(db, run_id, attempt, max(row[3] for row in parts), batches.from_points({key: points}))
    delete_chunks(db, [row[0] for row in parts])
    note_span(db, run_id, key, int(points.steps[-1] - points.steps[0]))
    return len(parts) - 1
