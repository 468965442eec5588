"""Storing metric batches and heartbeats from running jobs."""
import logging
import math
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from orchestrator.experiments.models import Run
from orchestrator.experiments.services import run_transition
from orchestrator.metrics import batches, live, store
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
    restart_from = None
    with transaction.atomic():
        seq = store.next_seq(run.pk)
        first = int(batch.steps.min())
        if store.note_attempt_start(run.pk, attempt, first, seq) and attempt > 1:
            if store.supersede(run.pk, attempt, first):
                restart_from = first
        reposted = store.keys_already_stored(run.pk, {key: int(p.steps[0]) for key, p in incoming.items()})
        replacing = {key: incoming[key] for key in reposted}
        store.remove_steps(run.pk, replacing)
        store.insert_chunks(run.pk, attempt, seq, incoming)
        if restart_from is not None:
            store.rebuild_series(run.pk)
            if store.is_postgres():
                store.rebuild_rollups(run.pk, from_step=restart_from)
        else:
            _fold_in(run.pk, batch.only(set(incoming) - reposted), replacing)
        transaction.on_commit(lambda: live.publish(
            run.pk, lambda: live.batch_event(seq=seq, attempt=attempt, restart_from=restart_from, cols=cols)))
    _note_progress(run, step=max(cols.steps))
    return len(cols.keys)


def _fold_in(run_id: int, appended: batches.SortedBatch, reposted: dict[str, Points]) -> None:
    """Bring summaries and rollups up to date: appending keys merge the batch's own aggregates,
    re-posted keys are recomputed over the steps they touched."""
    if len(appended.steps):
        store.upsert_series(run_id, batches.key_summaries(appended))
        if store.is_postgres():
            store.merge_rollups(run_id, batches.rollup_rows(appended, store.LEVELS))
    if reposted:
        store.rebuild_series(run_id, reposted)
        if store.is_postgres():
            store.rebuild_rollups(run_id, from_step=min(int(p.steps[0]) for p in reposted.values()),
                                  to_step=max(int(p.steps[-1]) for p in reposted.values()), keys=list(reposted))


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
