"""Everything a run reports besides metric points, through one endpoint (POST
/api/v1/runs/<id>/updates, the run's token): config changes, summary values, metric
definitions, alerts, histograms and tables. What W&B scripts call `config.update`, `summary`,
`define_metric`, `alert`, `Histogram` and `Table`.

Each kind is one small function; `apply_update` picks it from the body's `kind`. A table whose
columns fit rollout samples (a prompt and a response, perhaps a reward) is also stored as samples,
so the samples view shows it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from django.db import transaction
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.experiments.models import ExternalRun, Run
from orchestrator.metrics.models import MAX_KEY_LENGTH, MAX_STEP, RunHistogram, RunSummary, RunTable
from orchestrator.metrics.schemas import key_problem

MAX_BINS = 10_000
MAX_TABLE_ROWS = 10_000
MAX_TABLE_COLUMNS = 200
MAX_SUMMARY_KEYS = 1_000
SUMMARY_AGGREGATES = ("max", "min", "last", "mean")


class UpdateError(ValueError):
    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(message)
        self.field, self.message, self.status = field, message, status


def _checked_key(value: str) -> str:
    if problem := key_problem(value):
        raise ValueError(problem)
    return value


Key = Annotated[str, Field(min_length=1, max_length=MAX_KEY_LENGTH)]
Step = Annotated[int, Field(ge=0, le=MAX_STEP)]


class _Kind(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ConfigUpdate(_Kind):
    kind: Literal["config"]
    config: dict[str, Any]


class SummaryUpdate(_Kind):
    kind: Literal["summary"]
    summary: dict[str, Any] = Field(max_length=MAX_SUMMARY_KEYS)

    @field_validator("summary")
    @classmethod
    def _keys(cls, value: dict) -> dict:
        for key in value:
            _checked_key(key)
        return value


class DefineMetric(_Kind):
    kind: Literal["define_metric"]
    name: Key
    step_metric: Key | None = None
    summary: Literal["max", "min", "last", "mean"] | None = None

    _name = field_validator("name", "step_metric")(lambda v: v if v is None else _checked_key(v))


class AlertUpdate(_Kind):
    kind: Literal["alert"]
    title: str = Field(min_length=1, max_length=200)
    text: str = Field(default="", max_length=4_000)
    level: Literal["info", "warn", "error"] = "info"


class HistogramUpdate(_Kind):
    kind: Literal["histogram"]
    key: Key
    step: Step
    bins: list[float] = Field(min_length=2, max_length=MAX_BINS + 1)
    counts: list[float] = Field(min_length=1, max_length=MAX_BINS)

    _key = field_validator("key")(_checked_key)


class TableUpdate(_Kind):
    kind: Literal["table"]
    key: Key
    step: Step
    columns: list[str] = Field(min_length=1, max_length=MAX_TABLE_COLUMNS)
    rows: list[list[Any]] = Field(max_length=MAX_TABLE_ROWS)

    _key = field_validator("key")(_checked_key)


KINDS = {
    "config": ConfigUpdate,
    "summary": SummaryUpdate,
    "define_metric": DefineMetric,
    "alert": AlertUpdate,
    "histogram": HistogramUpdate,
    "table": TableUpdate,
}


def parse_update(body: Any) -> _Kind:
    """The update a body describes; UpdateError names the field and the reason."""
    if not isinstance(body, dict):
        raise UpdateError("(body)", "must be an object with a kind")
    kind = body.get("kind")
    if kind not in KINDS:
        raise UpdateError("kind", f"one of {', '.join(KINDS)}, got {str(kind)[:40]!r}")
    try:
        update = KINDS[kind].model_validate(body)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        field = ".".join(str(p) for p in err["loc"]) or "(body)"
        raise UpdateError(field, err["msg"]) from None
    if isinstance(update, HistogramUpdate) and len(update.bins) != len(update.counts) + 1:
        raise UpdateError(
            "bins", f"{len(update.counts) + 1} edges for {len(update.counts)} counts, got {len(update.bins)}"
        )
    if (
        isinstance(update, TableUpdate)
        and (bad := next((i for i, r in enumerate(update.rows) if len(r) != len(update.columns)), None)) is not None
    ):
        raise UpdateError(f"rows.{bad}", f"{len(update.rows[bad])} cells for {len(update.columns)} columns")
    return update


# What other apps do with an update, registered from their AppConfig.ready() so that metrics never
# imports them: "alert" (alerts: the run's alert, notified; returns its id) and "table" (samples:
# a table whose columns fit stored as rollout samples too; returns how many).
_RECEIVERS: dict[str, Callable[..., Any]] = {}


def receive(kind: str, handler: Callable[..., Any]) -> None:
    _RECEIVERS[kind] = handler


def _receiver(kind: str) -> Callable[..., Any]:
    if kind not in _RECEIVERS:
        raise UpdateError("kind", f"{kind} updates are not taken by this server (its app is not installed)", 501)
    return _RECEIVERS[kind]


def apply_update(*, run: Run, body: Any) -> dict[str, Any]:
    """Apply one update to the run; what it did, for the answer."""
    update = parse_update(body)
    return _APPLY[type(update)](run, update)


def deep_merge(base: dict, changes: dict) -> dict:
    """`base` with `changes` merged in: nested sections merge, other values replace."""
    merged = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _config(run: Run, update: ConfigUpdate) -> dict:
    if not ExternalRun.objects.filter(run=run).exists():
        raise UpdateError("kind", "the config of a run the lab's cluster runs is the one it was submitted with", 409)
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        locked.config = deep_merge(locked.config or {}, update.config)
        locked.save(update_fields=["config"])
    return {}


def _summary_row(run: Run) -> RunSummary:
    RunSummary.objects.get_or_create(run=run)
    return RunSummary.objects.select_for_update().get(run=run)


def _summary(run: Run, update: SummaryUpdate) -> dict:
    with transaction.atomic():
        row = _summary_row(run)
        row.values = {**row.values, **update.summary}
        row.save(update_fields=["values"])
    return {}


def _define_metric(run: Run, update: DefineMetric) -> dict:
    with transaction.atomic():
        row = _summary_row(run)
        row.definitions = {
            **row.definitions,
            update.name: {"step_metric": update.step_metric, "summary": update.summary},
        }
        row.save(update_fields=["definitions"])
    return {}


def _alert(run: Run, update: AlertUpdate) -> dict:
    alert_id = _receiver("alert")(run=run, title=update.title, text=update.text, level=update.level)
    return {"alert": alert_id}


def _histogram(run: Run, update: HistogramUpdate) -> dict:
    if not all(map(math.isfinite, update.bins)) or any(
        b >= a for a, b in zip(update.bins[1:], update.bins, strict=False)
    ):
        raise UpdateError("bins", "edges must be finite and increasing")
    if not all(math.isfinite(c) and c >= 0 for c in update.counts):
        raise UpdateError("counts", "counts must be finite and not negative")
    RunHistogram.objects.update_or_create(
        run=run,
        key=update.key,
        step=update.step,
        defaults={"bins": update.bins, "counts": update.counts, "time": time.time()},
    )
    return {}


def _table(run: Run, update: TableUpdate) -> dict:
    RunTable.objects.update_or_create(
        run=run,
        key=update.key,
        step=update.step,
        defaults={"columns": update.columns, "rows": update.rows, "time": time.time()},
    )
    stored = _receiver("table")(run=run, key=update.key, step=update.step, columns=update.columns, rows=update.rows)
    return {"samples": stored}


_APPLY = {
    ConfigUpdate: _config,
    SummaryUpdate: _summary,
    DefineMetric: _define_metric,
    AlertUpdate: _alert,
    HistogramUpdate: _histogram,
    TableUpdate: _table,
}

# --- reads ---------------------------------------------------------------------------------------


def user_summaries(run_ids: list[int]) -> dict[int, RunSummary]:
    return {row.run_id: row for row in RunSummary.objects.filter(run_id__in=run_ids)}


def summary_values(summary: dict[str, dict], row: RunSummary | None) -> dict[str, dict]:
    """A run's metric summaries with the run's own summary: each key the run set (or defined an
    aggregate for) gains "value", W&B's `run.summary[key]`; a key set but never logged is there
    with "value" alone."""
    if row is None:
        return summary
    out = dict(summary)
    aggregates = {k: d.get("summary") for k, d in row.definitions.items() if d.get("summary") and k in out}
    means = _means(row.run_id, [k for k, a in aggregates.items() if a == "mean"])
    for key, aggregate in aggregates.items():
        out[key] = {**out[key], "value": means.get(key) if aggregate == "mean" else out[key].get(aggregate)}
    for key, value in row.values.items():
        out[key] = {**out.get(key, {}), "value": value}
    return dict(sorted(out.items()))


def _means(run_id: int, keys: list[str]) -> dict[str, float | None]:
    """The mean of each key's finite live values (every chunk carries its sum and count)."""
    if not keys:
        return {}
    from django.db.models import Sum

    from orchestrator.metrics.models import MetricChunk

    rows = (
        MetricChunk.objects.filter(run_id=run_id, key__in=keys, superseded=False)
        .values("key")
        .annotate(total=Sum("sum_value"), n=Sum("n_finite"))
    )
    return {r["key"]: (r["total"] / r["n"] if r["n"] else None) for r in rows}
