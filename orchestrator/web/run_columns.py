"""The runs table's metric columns: which keys, which summary of each, and sorting by one.

    ?cols=train/reward_mean,eval/avg_acc&stat=tail_mean&sort=-metric:eval/avg_acc

`cols` (at most MAX_COLUMNS metric keys) replaces the default columns; `stat` is one of STATS
(`last` by default; `tail_mean` is the mean of the last 10% of the key's updates, as the heatmap
uses); `sort=metric:<key>` (or `-metric:<key>`) orders runs by that summary, runs without the
key last. Values come from metrics.summaries (one query per page, whatever the number of keys).
"""

from __future__ import annotations

from django.db.models import F, OuterRef, QuerySet, Subquery

from orchestrator.metrics.models import MetricSeries
from orchestrator.metrics.schemas import KEY_PATTERN
from orchestrator.metrics.summaries import refresh_stale_tails, run_summaries
from orchestrator.metrics.updates import user_summaries

DEFAULT_COLUMNS = ("train/reward_mean", "eval/avg_acc", "actor/clip_frac")
STATS = {"last": "last_value", "tail_mean": "tail_mean", "min": "min_value", "max": "max_value"}
STAT_LABELS = {"last": "last value", "tail_mean": "mean of the last 10% of updates", "min": "minimum", "max": "maximum"}
MAX_COLUMNS = 8
SORT_PREFIX = "metric:"


def parse_columns(params) -> tuple[list[str], str, list[dict[str, str]]]:
    """(keys, stat, errors) from ?cols= and ?stat=; a bad value falls back to the default and
    names the field."""
    errors: list[dict[str, str]] = []
    raw = ",".join(params.getlist("cols")) if hasattr(params, "getlist") else params.get("cols", "")
    keys = list(dict.fromkeys(k.strip() for k in raw.split(",") if k.strip()))
    bad = [k for k in keys if not KEY_PATTERN.match(k)]
    if bad:
        errors.append({"field": "cols", "message": f"not a metric key: {bad[0][:80]!r}"})
        keys = []
    if len(keys) > MAX_COLUMNS:
        errors.append({"field": "cols", "message": f"at most {MAX_COLUMNS} metric columns, got {len(keys)}"})
        keys = keys[:MAX_COLUMNS]
    stat = params.get("stat") or "last"
    if stat not in STATS:
        errors.append({"field": "stat", "message": f"one of {', '.join(STATS)}, got {stat[:40]!r}"})
        stat = "last"
    return keys or list(DEFAULT_COLUMNS), stat, errors


def metric_sort_key(sort: str) -> str | None:
    """The metric key of a `metric:<key>` sort (with or without '-'), else None."""
    name = sort.lstrip("-")
    if name.startswith(SORT_PREFIX):
        key = name[len(SORT_PREFIX) :]
        return key if KEY_PATTERN.match(key) else None
    return None


def order_by_metric(runs: QuerySet, key: str, stat: str, *, descending: bool) -> QuerySet:
    """Runs ordered by their `stat` summary of `key`; runs without it go last."""
    if stat == "tail_mean":
        refresh_stale_tails(key)  # the cached column is exact for every run before ordering on it
    value = Subquery(MetricSeries.objects.filter(run=OuterRef("pk"), key=key).values(STATS[stat])[:1])
    runs = runs.annotate(metric_sort=value)
    order = F("metric_sort").desc(nulls_last=True) if descending else F("metric_sort").asc(nulls_last=True)
    return runs.order_by(order, "-id")


def column_values(run_ids: list[int], keys: list[str], stat: str) -> dict[int, list[float | None]]:
    """{run id: [the stat of each key, None where missing]} for a page of runs."""
    found, own = run_summaries(run_ids, keys), user_summaries(run_ids)

    def value(rid: int, key: str):
        stat_value = found.get(rid, {}).get(key, {}).get(stat)
        if stat_value is None and rid in own:  # a value the run put in its summary (never logged as a series)
            stat_value = own[rid].values.get(key)
        return stat_value

    return {rid: [value(rid, key) for key in keys] for rid in run_ids}
