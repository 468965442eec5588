"""Reads for the runs table: filtering, sorting, paging and the latest key metrics of a page."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import User
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import F, Max, Q, QuerySet

from orchestrator.experiments.access import visible_runs
from orchestrator.experiments.models import Run
from orchestrator.experiments.runquery import QueryError, parse_query

# The metrics shown as columns of the runs table.
KEY_METRICS = ("train/reward_mean", "eval/avg_acc", "actor/clip_frac")
PAGE_SIZE = 50
SORTS = {
    "id": "id", "name": "name", "state": "state", "priority": "priority", "step": "step",
    "started": "started_at", "created": "created_at", "user": "owner__username", "backend": "backend",
}


@dataclass
class RunFilter:
    q: str = ""
    state: str = ""
    user: str = ""
    project: str = ""
    tag: str = ""
    experiment: int | None = None
    sort: str = "-id"
    page: int = 1
    errors: list[str] = field(default_factory=list)

    @classmethod
    def from_params(cls, params) -> "RunFilter":
        def number(name: str, default: int | None) -> int | None:
            try:
                return int(params.get(name) or default)
            except (TypeError, ValueError):
                return default

        return cls(
            q=params.get("q", "").strip(), state=params.get("state", ""), user=params.get("user", ""),
            project=params.get("project", ""), tag=params.get("tag", ""),
            experiment=number("experiment", None), sort=params.get("sort", "-id"), page=number("page", 1) or 1,
        )


def filtered_runs(user: User, f: RunFilter) -> QuerySet[Run]:
    runs = visible_runs(user)
    if f.state:
        runs = runs.filter(state=f.state)
    if f.user:
        runs = runs.filter(owner__username=f.user)
    if f.project:
        runs = runs.filter(experiment__project__name=f.project)
    if f.experiment:
        runs = runs.filter(experiment_id=f.experiment)
    if f.tag:
        runs = runs.filter(pk__in=Run.tags.through.objects.filter(tag__name=f.tag).values("run_id"))
    if f.q:
        try:
            query = parse_query(f.q)
        except QueryError as exc:
            f.errors.append(str(exc))
            return runs.none()
        runs = runs.filter(query)
    key = f.sort.lstrip("-")
    if key not in SORTS:
        f.sort, key = "-id", "id"
    order = F(SORTS[key]).desc(nulls_last=True) if f.sort.startswith("-") else F(SORTS[key]).asc(nulls_last=True)
    return runs.order_by(order, "-id")


def runs_page(user: User, f: RunFilter) -> Page:
    """One page of the runs table, with tags prefetched and `latest` (key -> value) on each run."""
    runs = filtered_runs(user, f).prefetch_related("tags")
    page = Paginator(runs, PAGE_SIZE).get_page(f.page)
    latest = latest_values([run.pk for run in page.object_list], KEY_METRICS)
    for run in page.object_list:
        run.latest = [latest.get(run.pk, {}).get(key) for key in KEY_METRICS]
    return page


def latest_values(run_ids: list[int], keys: tuple[str, ...] | list[str]) -> dict[int, dict[str, Any]]:
    """{run_id: {key: value at the highest step of the latest attempt}}.

    The metrics app owns MetricPoint; when it offers `orchestrator.metrics.selectors.latest_values`
    with this signature, that one is used instead.
    """
    if not run_ids:
        return {}
    try:
        from orchestrator.metrics.selectors import latest_values as metrics_latest_values
    except ImportError:
        metrics_latest_values = None
    if metrics_latest_values is not None:
        return metrics_latest_values(run_ids, list(keys))
    from orchestrator.metrics.models import MetricPoint

    points = MetricPoint.objects.filter(run_id__in=run_ids, key__in=keys)
    out: dict[int, dict[str, Any]] = {}
    if connection.vendor == "postgresql":
        rows = points.order_by("run_id", "key", "-attempt", "-step").distinct("run_id", "key")
        for run_id, key, value in rows.values_list("run_id", "key", "value"):
            out.setdefault(run_id, {})[key] = value
        return out
    last = points.values("run_id", "key").annotate(attempt=Max("attempt"))
    wanted = Q()
    for row in last:
        wanted |= Q(run_id=row["run_id"], key=row["key"], attempt=row["attempt"])
    for run_id, key, value in points.filter(wanted).order_by("step").values_list("run_id", "key", "value"):
        out.setdefault(run_id, {})[key] = value
    return out
