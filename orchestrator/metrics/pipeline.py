"""The one write path of metric points: every batch, whatever its shape, on either database, takes
the same steps (db.py sends them in round trips on PostgreSQL, one by one on SQLite).

1. Before the run's lock: the rows of the batch's chunks, summaries and rollups (store.prepare;
   numpy, packed for the wire), so the run's serial section holds no batch-sized work.
2. First round trip: BEGIN, the lock timeout, the run's next batch number (which locks the run's
   stream row until commit), the attempt's start, the steps of the live chunks near the batch's
   steps (none for a key that appends), and the riders' reads (ingest_hooks.py: the alerts).
3. In this process: is a restart due (the first batch of a later attempt: the older attempts'
   points from its first step on are superseded)? Does the batch post a step a live chunk holds?
   Only then does one more round trip read those chunks, and the steps are taken out of them (the
   last post wins): a point posted again as it is stored (a retry, a backfill) changes no
   summary; where a value changed, the key's summaries and rollups are recomputed over the steps
   the batch touched.
4. Last round trip: the batch's chunks, the summaries and rollups folded from its own aggregates
   (order-independent, so a batch behind a key's head costs what an append costs), the run's
   progress step, the riders' writes, COMMIT.

The common batch (an append, or new steps behind a key's head where no stored chunk reaches) takes
these steps in another order, so that the run's lock is held only while PostgreSQL runs its writes
(_append): the first round trip reads the chunks near the batch without the lock (finding some, it
goes on the way above, one round trip more); the last takes the lock, checks that no batch committed
since stored steps in the batch's ranges (else it starts over the way above), and writes. Two round
trips: it reads nothing stored, inserts its chunks and rollup rows, and upserts one summary row per
key.

Outside a caller's transaction the path carries its own BEGIN/COMMIT; inside one (tests, a caller's
atomic block) it runs in a savepoint. The stream row lock orders a run's batches and numbers them
without gaps, in commit order; (run, attempt, key, step) is stored once, its last post winning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psycopg
from django.conf import settings
from django.db import connection, transaction

from orchestrator.metrics import store
from orchestrator.metrics.batches import SortedBatch
from orchestrator.metrics.chunks import STEP
from orchestrator.metrics.db import Statements, is_postgres
from orchestrator.metrics.ingest_hooks import Rider


class Busy(Exception):
    """The run's batch lock was not granted within the lock timeout: its queue is deep."""


@dataclass(frozen=True)
class Written:
    seq: int
    restart_from: int | None  # the step older attempts' points were superseded from


def lock_timeout_sql() -> str:
    ms = int(getattr(settings, "OPL_INGEST_LOCK_TIMEOUT_MS", 5000))
    return f"SET LOCAL lock_timeout = {ms}"


def write_batch(run_id: int, attempt: int, batch: SortedBatch, riders: Sequence[Rider] = ()) -> Written:
    """Store a non-empty batch idempotently on (run, attempt, key, step). Raises Busy when the
    run's lock is not granted in time."""
    if not is_postgres():
        with transaction.atomic():
            db = Statements()
            return _write(db, run_id, attempt, batch, riders=(), commit=None, prepared=store.prepare(db, batch))
    prepared = store.prepare(Statements(), batch)  # before any lock
    try:
        return _in_transaction(lambda db, commit: _append(db, run_id, attempt, batch, riders, commit, prepared))
    except store.NearStored:  # a batch committed meanwhile stored steps near this one, or a restart is due
        return _in_transaction(
            lambda db, commit: _write(db, run_id, attempt, batch, riders=riders, commit=commit, prepared=prepared)
        )


def _in_transaction(write) -> Written:
    """write(db, commit) in pipeline mode, in its own transaction (a savepoint inside a caller's)."""
    # BEGIN/COMMIT as statements, not psycopg's transaction(), which waits for each answer
    begin, commit, undo = (
        (
            "SAVEPOINT opl_ingest",
            "RELEASE SAVEPOINT opl_ingest",
            "ROLLBACK TO SAVEPOINT opl_ingest; RELEASE SAVEPOINT opl_ingest",
        )
        if connection.in_atomic_block
        else ("BEGIN", "COMMIT", "ROLLBACK")
    )
    try:
        with Statements(pipelined=True) as db:
            db.execute(begin)
            db.execute(lock_timeout_sql())
            written = write(db, commit)
        return written() if callable(written) else written
    except Exception as exc:
        _undo(undo)
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            raise Busy(str(exc)) from exc
        if isinstance(exc, psycopg.errors.DivisionByZero):
            raise store.NearStored(str(exc)) from exc
        raise


def _append(
    db: Statements, run_id: int, attempt: int, batch: SortedBatch, riders, commit: str, prepared: store.Prepared
):
    """The common batch with the run's lock held only while PostgreSQL runs the writes (no round
    trip to this process inside it, so a run's writers overlap everything else): the stored steps
    near the batch are read first, without the lock; the last round trip takes the lock and
    checks (store.guard_append) that no batch committed since stored steps in the batch's ranges,
    then writes and commits. A batch whose ranges reach stored chunks (a re-post, writers
    interleaving steps) continues the careful way (_write) in the same transaction, one round trip
    more; a failed guard makes the caller start over that way."""
    seen = store.committed_seq(db, run_id)
    near = store.near_chunks(db, run_id, batch)
    for rider in riders:
        rider.send_reads(db.conn)
    db.sync()
    if near.rows():  # stored chunks reach into the batch's ranges: re-posted or interleaved steps
        return _write(db, run_id, attempt, batch, riders=riders, commit=commit, prepared=prepared, reads_sent=True)
    seq_answer = store.next_seq(db, run_id)
    store.note_attempt_start(db, run_id, attempt, int(batch.steps.min()))
    store.guard_append(db, run_id, attempt, batch, (seen.one() or (0,))[0])
    store.insert_chunks(db, run_id, attempt, None, batch, prepared=prepared)
    _fold(db, run_id, batch, np.ones(len(batch), dtype=bool), set(), prepared)
    store.note_progress(db, run_id, int(batch.steps.max()))
    for rider in riders:
        rider.send_writes(db.cursor())
    db.execute(commit)
    return lambda: Written(seq=seq_answer.one()[0], restart_from=None)  # answered once the pipeline is synced


def _write(
    db: Statements,
    run_id: int,
    attempt: int,
    batch: SortedBatch,
    *,
    riders,
    commit: str | None,
    prepared: store.Prepared,
    reads_sent: bool = False,
) -> Written:
    """Any batch, the run's lock taken first: re-posted steps, a restart, and the demo's SQLite."""
    first = int(batch.steps.min())
    for rider in () if reads_sent else riders:  # before the run's lock, as _append sends them: one lock order
        rider.send_reads(db.conn)
    seq_answer = store.next_seq(db, run_id)
    start_answer = store.note_attempt_start(db, run_id, attempt, first)
    near = store.near_chunks(db, run_id, batch)
    db.sync()
    seq = seq_answer.one()[0]
    restart_from = None
    if start_answer.one() is not None and attempt > 1 and store.supersede(db, run_id, attempt, first):
        restart_from = first
        near = store.near_chunks(db, run_id, batch)  # the superseded chunks are out of the way now
        db.sync()
    fresh, changed = _take_out_stored(db, batch, near.rows())
    store.insert_chunks(db, run_id, attempt, seq, batch, prepared=prepared)
    if restart_from is not None:
        store.rebuild_series(run_id, db=db)
        if db.postgres:
            store.rebuild_rollups(run_id, from_step=restart_from, db=db)
    else:
        _fold(db, run_id, batch, fresh, changed, prepared)
    store.note_progress(db, run_id, int(batch.steps.max()))
    for rider in riders:
        rider.send_writes(db.cursor())
    if commit is not None:
        db.execute(commit)
    return Written(seq=seq, restart_from=restart_from)


def _take_out_stored(db: Statements, batch: SortedBatch, near: list[tuple]) -> tuple[np.ndarray, set[str]]:
    """Take the batch's steps out of the live chunks that hold them (a chunk is rewritten, or
    deleted once empty), so that a (run, key, step) is live once and its last post wins. Returns
    which of the batch's points are new to storage (a point posted again as stored, by a retry or
    a backfill, changes no summary), and the keys where the batch changes a stored point."""
    fresh, changed = np.ones(len(batch), dtype=bool), set()
    ranges = batch.key_ranges()
    hit = [
        cid
        for cid, key, steps in near
        if np.isin(np.frombuffer(steps, STEP), batch.steps[slice(*ranges[key])], assume_unique=True).any()
    ]
    if not hit:
        return fresh, changed
    emptied = []
    for cid, key, _attempt, _seq, _first, stored in store.chunks_by_id(db, hit):
        a, b = ranges[key]
        again = np.isin(stored.steps, batch.steps[a:b], assume_unique=True)
        at = a + np.searchsorted(batch.steps[a:b], stored.steps[again])
        old = stored.take(again)
        same = (
            (batch.specials[at] == old.specials)
            & (batch.times[at] == old.times)
            & ((batch.values[at] == old.values) | (old.specials != 0))
        )
        fresh[at[same]] = False
        if not same.all():
            changed.add(key)
        if again.all():
            emptied.append(cid)
        else:
            store.rewrite_chunk(db, cid, stored.take(~again))
    store.delete_chunks(db, emptied)
    return fresh, changed


def _fold(
    db: Statements, run_id: int, batch: SortedBatch, fresh: np.ndarray, changed: set[str], prepared: store.Prepared
) -> None:
    """Summaries and rollups: merged from the batch's own aggregates where its points are new to
    their key; recomputed over the touched steps where a stored value changed."""
    if fresh.all() and not changed:  # the common batch: what was prepared before the lock
        store.fold_series(db, run_id, None, prepared=prepared)
        if db.postgres:
            store.insert_rollups(db, run_id, None, prepared=prepared)
        return
    new = batch.where(fresh)
    appended = new.only(set(new.key_names) - changed) if changed else new
    if len(appended):
        store.fold_series(db, run_id, appended)
        if db.postgres:
            store.insert_rollups(db, run_id, appended)
    if not changed:
        return
    if not db.postgres:
        store.rebuild_series(run_id, changed, db=db)
        return
    touched = batch.only(changed)
    store.fold_series(db, run_id, touched, count=False)  # the step range; the rest from the rollups below
    store.rebuild_rollups(
        run_id, from_step=int(touched.steps.min()), to_step=int(touched.steps.max()), keys=sorted(changed), db=db
    )
    store.refresh_series_from_rollups(db, run_id, sorted(changed))


def _undo(undo: str) -> None:
    """Roll the transaction (or savepoint) back; a connection that cannot (PostgreSQL went away)
    is closed, so Django opens a new one instead of reusing a broken one."""
    try:
        for statement in undo.split("; "):
            connection.connection.execute(statement)
    except psycopg.Error:
        if connection.in_atomic_block:
            connection.needs_rollback = True
        else:
            connection.close()
