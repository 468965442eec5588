"""A sweep at a glance: each run's place on the sweep's axes and one summary of one metric key,
for the parallel-coordinates panel and the summary-against-axis scatter (static/js/sweep_glance.js).

The axes are the config fields whose value differs across the runs (the seed aside: every run is
its own line already), as the compare page's config diff reads them."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from orchestrator.experiments.models import Run
from orchestrator.metrics.compare import comparable, differing_fields
from orchestrator.metrics.selectors import keys_of
from orchestrator.metrics.study_metric import default_metric
from orchestrator.metrics.summaries import run_summaries

STATS = {"tail_mean": "mean of the last 10% of updates", "last": "last value", "min": "minimum", "max": "maximum"}
NOT_AN_AXIS = {"train.seed"}


class GlanceError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def sweep_axes(runs: list[Run]) -> list[str]:
    """The sweep's real axes: config fields that vary across the runs (the seed excepted) with at
    least two values each shared by two runs or more, as a grid's axes are. A field that differs for
    one run only (a warm-up run's checkpoint.every among a sweep's runs) is no axis. When no field
    qualifies (a one-field sweep without seeds), every varying field."""
    varying = [f for f in differing_fields([r.config for r in runs]) if f not in NOT_AN_AXIS]
    flat = [comparable(r.config) for r in runs]
    real = [f for f in varying if _shared_values(f, flat) >= 2]
    return real or varying


def heatmap_fields(runs: list[Run], fields: list[str]) -> tuple[str, str]:
    """The compare page's "Metric over two fields" defaults: the first two real axes among `fields`
    (the fields that differ), else the first two fields."""
    axes = [f for f in sweep_axes(runs) if f in fields]
    ordered = axes + [f for f in fields if f not in axes]
    return (ordered + ["", ""])[0], (ordered + ["", ""])[1]


def _shared_values(field: str, flat: list[dict]) -> int:
    counts = Counter(repr(c.get(field)) for c in flat)
    return sum(1 for n in counts.values() if n >= 2)


def sweep_glance(runs: list[Run], *, key: str | None = None, stat: str = "tail_mean") -> dict[str, Any]:
    """{"key", "stat", "stats", "keys", "axes", "runs": [{"id", "name", "axes": {field: value}, "value"}]}.
    value is the run's `stat` of `key` (None: no finite value yet)."""
    if stat not in STATS:
        raise GlanceError("stat", f"one of {', '.join(STATS)}, got {stat[:40]!r}")
    ids = [r.pk for r in runs]
    keys = keys_of(ids)
    if key is None:
        key = default_metric(keys, also=("eval/avg_acc",))
    elif key not in keys:
        raise GlanceError("key", f"none of these runs logged {key[:200]!r}")
    axes = sweep_axes(runs)
    summaries = run_summaries(ids, [key]) if key else {}
    rows = []
    for run in runs:
        flat = comparable(run.config)
        value = summaries.get(run.pk, {}).get(key, {}).get(stat)
        rows.append(
            {
                "id": run.pk,
                "name": run.name,
                "axes": {field: _json_value(flat.get(field)) for field in axes},
                "value": value if isinstance(value, int | float) and math.isfinite(value) else None,
            }
        )
    return {"key": key, "stat": stat, "stats": STATS, "keys": keys, "axes": axes, "runs": rows}


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return str(value)
