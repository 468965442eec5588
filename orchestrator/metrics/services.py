"""Storing metric batches and heartbeats from running jobs."""

import logging
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from orchestrator.experiments.models import Run
from orchestrator.experiments.services import run_transition
from orchestrator.metrics import batches, ingest_hooks, live, offpolicy_keys, pipeline, store
from orchestrator.metrics.chunks import Columns, as_float
from orchestrator.metrics.schemas import BatchError, Parsed, encode_value, parse_columns, parse_points

S = Run.State
log = logging.getLogger(__name__)


def metrics_ingest(*, run: Run, attempt: int, points: Any) -> int:
    """Store a batch idempotently on (run, attempt, key, step) and announce it to live charts.

    `points` is the wire list (validated here, refused whole with BatchError) or parsed Columns.
    The first batch of a restarted attempt that starts at step S supersedes the older attempts'
    points at steps >= S. Other apps ride along through ingest_hooks (the alert rules' reads and
    writes share the write path's round trips). Returns how many points the batch carried.
    """
    cols = points if isinstance(points, Columns) else parse_columns(points)
    if not cols.keys:
        return 0
    carried = len(cols.keys)
    cols = offpolicy_keys.with_product_keys(cols)  # other trainers' names read as the product's keys
    batch = batches.sort_batch(cols)
    riders = ingest_hooks.riders_for(run, batch.by_key())
    written = pipeline.write_batch(run.pk, attempt, batch, riders)
    _announce(run.pk, written.seq, attempt, written.restart_from, cols)
    _note_progress(run, step=None)
    for rider in riders:
        rider.after_commit(run=run, cols=cols)
    return carried


def metrics_ingest_points(*, run: Run, attempt: int, points: Any) -> Parsed:
    """Store every storable point of a wire batch and return what was refused, point by point:
    one bad point never costs the rest of the batch. BatchError only for a wrong envelope."""
    parsed = parse_points(points)
    metrics_ingest(run=run, attempt=attempt, points=parsed.cols)
    return parsed


def _announce(run_id: int, seq: int, attempt: int, restart_from: int | None, cols: Columns) -> None:
    """Publish the batch to live charts once it is committed (at once outside a transaction)."""
    transaction.on_commit(
        lambda: live.publish(
            run_id, lambda: live.batch_event(seq=seq, attempt=attempt, restart_from=restart_from, cols=cols)
        )
    )


def compact_recent_runs(*, within: timedelta = timedelta(days=1)) -> int:
    """Compact the chunks of runs that are active or finished within `within` (older runs were
    compacted while they were recent); returns how many chunks that removed."""
    recent = Run.objects.filter(Q(state__in=Run.ACTIVE) | Q(finished_at__gte=timezone.now() - within))
    return sum(
        store.compact_chunks(run_id, keep_batches=live.MAX_REPLAY_BATCHES)
        for run_id in recent.values_list("pk", flat=True)
    )


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


__all__ = ["BatchError", "encode_value", "metrics_ingest", "metrics_ingest_points", "run_heartbeat", "as_float"]
