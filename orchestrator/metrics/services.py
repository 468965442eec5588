"""Storing metric batches and heartbeats from running jobs."""
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from pydantic import ValidationError

from orchestrator.experiments.models import Run
from orchestrator.experiments.services import run_transition
from orchestrator.metrics.models import MetricPoint
from orchestrator.metrics.schemas import MetricIn

S = Run.State


class BatchError(ValueError):
    """A batch was refused whole; `errors` lists [{index, field, message}] for each bad row."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__(f"{len(errors)} invalid row(s)")
        self.errors = errors


def parse_points(rows: Any) -> list[MetricIn]:
    if not isinstance(rows, list):
        raise BatchError([{"index": None, "field": "points", "message": "must be a list"}])
    points, errors = [], []
    for index, row in enumerate(rows):
        try:
            points.append(MetricIn.model_validate(row))
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                field = ".".join(str(p) for p in err["loc"]) or "(row)"
                errors.append({"index": index, "field": field, "message": err["msg"]})
    if errors:
        raise BatchError(errors)
    return points


def metrics_ingest(*, run: Run, attempt: int, points: list[MetricIn]) -> int:
    """Store points idempotently on (run, attempt, key, step); returns how many were written."""
    if not points:
        return 0
    rows = [MetricPoint(run=run, attempt=attempt, key=p.key, step=p.step, value=p.value, time=p.time)
            for p in points]
    with transaction.atomic():
        MetricPoint.objects.bulk_create(
            rows, update_conflicts=True, unique_fields=["run", "attempt", "key", "step"],
            update_fields=["value", "time"],
        )
    _note_progress(run, step=max(p.step for p in points))
    return len(rows)


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


def metric_series(*, run: Run, key: str) -> list[tuple[int, float | None]]:
    """One key of one run, latest attempt winning at each step."""
    rows = (MetricPoint.objects.filter(run=run, key=key).order_by("step", "attempt")
            .values_list("step", "value"))
    merged: dict[int, float | None] = {}
    for step, value in rows:
        merged[step] = value
    return sorted(merged.items())


def metric_keys(*, run: Run) -> list[str]:
    return list(MetricPoint.objects.filter(run=run).values_list("key", flat=True).distinct().order_by("key"))


def latest_step(*, run: Run) -> int | None:
    return MetricPoint.objects.filter(run=run).aggregate(m=Max("step"))["m"]
