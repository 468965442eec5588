"""Storing metric batches and heartbeats from running jobs."""
import logging
import math
from datetime import timedelta
from typing import Any

import numpy as np
import psycopg
from django.db import OperationalError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from orchestrator.alerts.batch_check import BatchCheck
from orchestrator.alerts.services import alerts_after_ingest
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import run_transition
from orchestrator.metrics import batches, live, pipeline, store
from orchestrator.metrics.chunks import Points
from orchestrator.metrics.schemas import BatchError, encode_value, parse_columns  # noqa: F401 (re-exported)
from orchestrator.metrics.store import Columns

S = Run.State
log = logging.getLogger(__name__)


def metrics_ingest(*, run: Run, attempt: int, points: Any) -> int:
    """Store a batch idempotently on (run, attempt, key, step) and announce it to live charts.

    `points` is the wire list (validated here, refused whole with BatchError) or parsed Columns.
    The first batch of a restarted attempt that starts at step S supersedes the older attempts'
    points at steps >= S. Returns how many points were written.
    """
    cols = points if isinstance(points, Columns) else parse_columns(points)
    if not cols.keys:
        return 0
    batch = batches.sort_batch(cols)
    incoming = batch.by_key()
    if store.is_postgres():
        check = BatchCheck.for_batch(run, incoming)  # the alert rules' reads and writes ride on the pipeline's
        appended = pipeline.try_append(run.pk, attempt, batch, incoming, alert_check=check)
        if appended is not None:
            _announce(run.pk, appended.seq, attempt, None, cols)
            _note_progress(run, step=None)
            alerts_after_ingest(run=run, cols=cols, check=check)
            return len(cols.keys)
    try:
        seq, restart_from = _ingest_general(run.pk, attempt, batch, incoming)
    except OperationalError as exc:
        if isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
            raise pipeline.Busy(str(exc)) from exc
        raise
    _announce(run.pk, seq, attempt, restart_from, cols)
    _note_progress(run, step=max(cols.steps))
    alerts_after_ingest(run=run, cols=cols)
    return len(cols.keys)


def _announce(run_id: int, seq: int, attempt: int, restart_from: int | None, cols: Columns) -> None:
    """Publish the batch to live charts once it is committed (at once outside a transaction)."""
    transaction.on_commit(lambda: live.publish(
        run_id, lambda: live.batch_event(seq=seq, attempt=attempt, restart_from=restart_from, cols=cols)))


def _ingest_general(run_id: int, attempt: int, batch: batches.SortedBatch, incoming: dict) -> tuple[int, int | None]:
    """Any batch: behind a key's head, re-posted steps, the first batch of a restarted attempt."""
    restart_from = None
    with transaction.atomic():
        if store.is_postgres():
            with connection.cursor() as cur:
                cur.execute(pipeline.lock_timeout_sql())
        seq = store.next_seq(run_id)
        first = int(batch.steps.min())
        if store.note_attempt_start(run_id, attempt, first, seq) and attempt > 1:
            if store.supersede(run_id, attempt, first):
                restart_from = first
        behind = store.keys_already_stored(run_id, {key: int(p.steps[0]) for key, p in incoming.items()})
        replaced = store.remove_steps(run_id, {key: incoming[key] for key in behind}, behind)
        store.insert_chunks(run_id, attempt, seq, incoming)
        if restart_from is not None:
            store.rebuild_series(run_id)
            if store.is_postgres():
                store.rebuild_rollups(run_id, from_step=restart_from)
        else:
            _fold_in(run_id, batch, replaced)
    return seq, restart_from


def _fold_in(run_id: int, batch: batches.SortedBatch, replaced: dict[str, Points]) -> None:
    """Bring summaries and rollups up to date in proportion to the batch.

    Points new to their key (appended, or behind the head where no point was) merge the batch's
    own aggregates. A re-posted step that carries the stored value and time again (a retry, a
    backfill) changes nothing. Keys where a re-post changed a stored point are recomputed over
    the steps the batch touched (rollups), and their summaries from the coarsest rollups."""
    keep = np.ones(len(batch.steps), dtype=bool)
    changed = []
    ranges = batch.key_ranges()
    for key, old in replaced.items():
        a, b = ranges[key]
        again = np.isin(batch.steps[a:b], old.steps, assume_unique=True)
        if _same_points(old, batch.where(_span_mask(len(keep), a, b, again))):
            keep[a:b] &= ~again
        else:
            keep[a:b] = False
            changed.append(key)
    new = batch.where(keep) if not keep.all() else batch
    if len(new.steps):
        store.upsert_series(run_id, batches.key_summaries(new))
        if store.is_postgres():
            store.merge_rollups(run_id, batches.rollup_rows(new, store.LEVELS))
    if not changed:
        return
    if not store.is_postgres():
        store.rebuild_series(run_id, changed)
        return
    touched = batch.only(set(changed))
    store.upsert_series(run_id, [s[:7] + (0, s[8]) for s in batches.key_summaries(touched)])  # first/last, span
    store.rebuild_rollups(run_id, from_step=int(touched.steps.min()), to_step=int(touched.steps.max()), keys=changed)
    store.refresh_series_from_rollups(run_id, changed)


def _span_mask(n: int, a: int, b: int, inner: np.ndarray) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[a:b] = inner
    return mask


def _same_points(old: Points, new: batches.SortedBatch) -> bool:
    """Whether re-posted points carry exactly the stored values, kinds and times (same steps, sorted)."""
    finite = old.specials == 0
    return (np.array_equal(old.steps, new.steps) and np.array_equal(old.specials, new.specials)
            and np.array_equal(old.values[finite], new.values[finite]) and np.array_equal(old.times, new.times))


def compact_recent_runs(*, within: timedelta = timedelta(days=1)) -> int:
    """Compact the chunks of runs that are active or finished within `within` (older runs were
    compacted while they were recent); returns how many chunks that removed."""
    recent = Run.objects.filter(Q(state__in=Run.ACTIVE) | Q(finished_at__gte=timezone.now() - within))
    return sum(store.compact_chunks(run_id, keep_batches=live.MAX_REPLAY_BATCHES)
               for run_id in recent.values_list("pk", flat=True))


def run_heartbeat(*, run: Run, step: int | None = None, total_steps: int | None = None) -> None:
    fields: dict[str, Any] = {"last_heartbeat": timezone.now()}
    if total_steps is not None:
        fields["total_steps"] = total_steps
    Run.objects.filter(pk=run.pk).update(**fields)
    _note_progress(run, step=step)


def _note_progress(run: Run, *, step: int | None) -> None:
    """A job that reports is running, whatever the last status poll said."""
    if step is not None:
        Run.objects.filter(pk=run.pk, step__lt=step).update(step=step)
    if run.state in (S.SUBMITTED, S.PENDING):
        if run.state == S.SUBMITTED:
            run_transition(run=run, to=S.PENDING)
        run_transition(run=run, to=S.RUNNING, reason="the trainer reported in")


def as_float(value: float | None, special: int) -> float:
    """A stored value as a Python float (NaN and ±inf restored)."""
    if special:
        return {1: math.nan, 2: math.inf, 3: -math.inf}[special]
    return math.nan if value is None else value


__all__ = ["BatchError", "encode_value", "metrics_ingest", "run_heartbeat", "as_float"]
