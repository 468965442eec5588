"""The common batch in two database round trips (PostgreSQL): one whose points are all new to
their keys, whether it appends or lands behind a key's head (another writer's steps).

psycopg's pipeline mode sends statements without waiting for each answer:

1. BEGIN, the lock timeout, the run's next batch number (which locks the run's stream row until
   commit), the attempt's start, and the steps of the live chunks near the batch's steps (none
   for a key that appends);
2. if no batch step is stored yet (and no restart is due): the chunks, summaries and rollups
   (their merges do not depend on arrival order), the run's progress step and COMMIT.

Otherwise the transaction is rolled back (so the batch number is not used) and the caller takes
the general path (services.metrics_ingest), which handles re-posted steps and restarts. Outside a
caller's transaction the pipeline carries its own BEGIN/COMMIT; inside one (tests, a caller's
atomic block) it runs in a savepoint. Guarantees are those of the general
path: the stream row lock orders batches and numbers them without gaps, in commit order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import psycopg
from django.conf import settings
from django.db import connection

from orchestrator.metrics import batches as batch_ops
from orchestrator.metrics import store
from orchestrator.metrics.chunks import STEP


class Busy(Exception):
    """The run's batch lock was not granted within the lock timeout: its queue is deep."""


@dataclass(frozen=True)
class Appended:
    seq: int
    points: int


def lock_timeout_sql() -> str:
    ms = int(getattr(settings, "OPL_INGEST_LOCK_TIMEOUT_MS", 5000))
    return f"SET LOCAL lock_timeout = {ms}"


_CHUNKS = (
    f"INSERT INTO {store.CHUNK} (run_id, key, attempt, seq, superseded, first_step, last_step, n, steps, values, "
    "specials, times, sum_value, n_finite) SELECT %s, u.key, %s, %s, false, u.first_step, u.last_step, u.n, u.steps, "
    "u.values, u.specials, u.times, u.sum_value, u.n_finite FROM unnest(%b::text[], %b::int8[], %b::int8[], %b::int4[], "
    "%b::bytea[], %b::bytea[], %b::bytea[], %b::bytea[], %b::float8[], %b::int4[]) "
    "AS u(key, first_step, last_step, n, steps, values, specials, times, sum_value, n_finite)"
)
_NEXT_SEQ = (f"INSERT INTO {store.STREAM} (run_id, last_seq) VALUES (%s, 1) ON CONFLICT (run_id) "
             f"DO UPDATE SET last_seq = {store.STREAM}.last_seq + 1 RETURNING last_seq")
# Runs after _NEXT_SEQ in the same transaction, so the subquery reads this batch's number.
_ATTEMPT = (f"INSERT INTO {store.ATTEMPT} (run_id, attempt, start_step, seq) VALUES (%s, %s, %s, "
            f"(SELECT last_seq FROM {store.STREAM} WHERE run_id = %s)) "
            f"ON CONFLICT (run_id, attempt) DO UPDATE SET start_step = excluded.start_step, seq = excluded.seq "
            f"WHERE {store.ATTEMPT}.start_step > excluded.start_step RETURNING start_step")
# The steps of the live chunks that may hold a step of a batch key's [lo, hi]: they end in
# [lo, hi + the key's widest chunk]. Sent with the lock: for a key that appends it finds nothing.
_NEAR = (f"SELECT c.key, c.steps FROM unnest(%b::text[], %b::int8[], %b::int8[]) AS b(key, lo, hi) "
         f"JOIN {store.SERIES} s ON s.run_id = %s AND s.key = b.key "
         f"JOIN {store.CHUNK} c ON c.run_id = %s AND NOT c.superseded AND c.key = b.key "
         "AND c.last_step >= b.lo AND c.last_step <= b.hi + s.max_span AND c.first_step <= b.hi")
_PROGRESS = "UPDATE experiments_run SET step = %s WHERE id = %s AND step < %s"


def try_append(run_id: int, attempt: int, batch: batch_ops.SortedBatch, incoming: dict,
               alert_check=None) -> Appended | None:
    """Store a batch whose points are all new to their keys (appended, or behind a key's head
    where no point is stored) in two round trips; None (nothing written) when it re-posts a
    stored step or a restart is due. Raises Busy when the run's lock is not granted in time.
    `alert_check` (orchestrator/alerts/batch_check.py) adds its reads to the first round trip
    and its watch row's update to the second, before COMMIT."""
    connection.ensure_connection()
    conn: psycopg.Connection = connection.connection
    # BEGIN/COMMIT as statements, not psycopg's transaction(), which waits for each answer
    begin, commit, undo = (("SAVEPOINT opl_ingest", "RELEASE SAVEPOINT opl_ingest",
                            "ROLLBACK TO SAVEPOINT opl_ingest; RELEASE SAVEPOINT opl_ingest")
                           if connection.in_atomic_block else ("BEGIN", "COMMIT", "ROLLBACK"))
    first_steps = {key: int(p.steps[0]) for key, p in incoming.items()}
    # Everything that depends on the batch alone is computed before the run's lock is taken.
    chunk_columns, summaries = _chunk_columns(incoming), batch_ops.key_summaries(batch)
    rollups = batch_ops.rollup_rows(batch, store.LEVELS).columns()
    top = int(batch.steps.max())
    appended = None
    try:
        with conn.pipeline() as pipe:
            cur, seq_cur, attempt_cur, near_cur = (conn.cursor() for _ in range(4))
            cur.execute(begin)
            cur.execute(lock_timeout_sql())
            seq_cur.execute(_NEXT_SEQ, [run_id])
            attempt_cur.execute(_ATTEMPT, [run_id, attempt, int(batch.steps.min()), run_id])
            near_cur.execute(_NEAR, [list(incoming), list(first_steps.values()),
                                     [int(p.steps[-1]) for p in incoming.values()], run_id, run_id])
            if alert_check is not None:
                alert_check.send_reads(conn)
            pipe.sync()
            seq = seq_cur.fetchone()[0]
            restarted = attempt_cur.fetchone() is not None and attempt > 1
            if restarted or _meets_stored_steps(near_cur.fetchall(), incoming):
                for statement in undo.split("; "):
                    cur.execute(statement)
            else:
                cur.execute(_CHUNKS, [run_id, attempt, seq, *chunk_columns])
                store.upsert_series(run_id, summaries, cursor=cur)
                cur.execute(store.MERGE_ROLLUPS, [run_id, *rollups])
                cur.execute(_PROGRESS, [top, run_id, top])
                if alert_check is not None:
                    alert_check.send_writes(cur)
                cur.execute(commit)
                appended = Appended(seq=seq, points=len(batch.steps))
    except Exception as exc:
        _undo(undo)
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            raise Busy(str(exc)) from exc
        raise
    return appended


def _undo(undo: str) -> None:
    """Roll the pipeline's transaction (or savepoint) back; a connection that cannot (PostgreSQL
    went away) is closed, so Django opens a new one instead of reusing a broken one."""
    try:
        for statement in undo.split("; "):
            connection.connection.execute(statement)
    except psycopg.Error:
        if connection.in_atomic_block:
            connection.needs_rollback = True
        else:
            connection.close()


def _meets_stored_steps(near: list[tuple[str, bytes]], incoming: dict) -> bool:
    """Whether a batch posts again a step that a live chunk near it holds."""
    return any(np.isin(np.frombuffer(steps, STEP), incoming[key].steps, assume_unique=True).any()
               for key, steps in near)


def _chunk_columns(incoming: dict) -> list[list]:
    fields = [store.chunk_fields(points) for points in incoming.values()]
    names = ("first_step", "last_step", "n", "steps", "values", "specials", "times", "sum_value", "n_finite")
    return [list(incoming)] + [[f[name] for f in fields] for name in names]
