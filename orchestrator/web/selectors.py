"""Reads for the runs table: filtering, sorting, paging and the latest key metrics of a page."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth.models import User
from django.core.paginator import Page, Paginator
from django.db.models import Count, F, IntegerField, OuterRef, QuerySet, Subquery

from orchestrator.alerts.models import Alert
from orchestrator.experiments.access import visible_runs
from orchestrator.experiments.models import Run
from orchestrator.experiments.queue import waiting_reasons
from orchestrator.lib.bounds import parse_id
from orchestrator.web.run_columns import (
    DEFAULT_COLUMNS,
    column_values,
    metric_sort_key,
    order_by_metric,
    parse_columns,
)
from orchestrator.web.runquery import QueryError, parse_query

# The metrics shown as columns of the runs table.
KEY_METRICS = DEFAULT_COLUMNS
PAGE_SIZE = 50
MAX_PARAM = 2000  # characters of one filter parameter
SORTS = {
    "id": "id",
    "name": "name",
    "state": "state",
    "priority": "priority",
    "step": "step",
    "started": "started_at",
    "created": "created_at",
    "user": "owner__username",
    "backend": "backend",
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
    errors: list[dict[str, str]] = field(default_factory=list)  # [{field, message}]
    cols: list[str] = field(default_factory=lambda: list(KEY_METRICS))  # metric columns (run_columns.py)
    stat: str = "last"
    column_errors: list[dict[str, str]] = field(default_factory=list)  # shown; the defaults stand in

    @classmethod
    def from_params(cls, params) -> RunFilter:
        errors: list[dict[str, str]] = []

        def number(name: str, default: int | None) -> int | None:
            raw = params.get(name) or ""
            if raw == "":
                return default
            if (value := parse_id(raw)) is None:
                errors.append({"field": name, "message": f"must be a whole number (ASCII digits), got {raw[:40]!r}"})
                return default
            return value

        text = {name: params.get(name, "") for name in ("q", "state", "user", "project", "tag", "sort")}
        for name, value in text.items():
            if len(value) > MAX_PARAM or "\x00" in value:
                errors.append({"field": name, "message": f"at most {MAX_PARAM} characters, no NUL"})
                text[name] = ""
        cols, stat, column_errors = parse_columns(params)
        return cls(
            cols=cols,
            stat=stat,
            column_errors=column_errors,
            q=text["q"].strip(),
            state=text["state"],
            user=text["user"],
            project=text["project"],
            tag=text["tag"],
            experiment=number("experiment", None),
            sort=text["sort"] or "-id",
            page=number("page", 1) or 1,
            errors=errors,
        )


def filtered_runs(user: User, f: RunFilter) -> QuerySet[Run]:
    runs = visible_runs(user)
    if f.errors:
        return runs.none()
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
            f.errors.append({"field": "q", "message": str(exc)})
            return runs.none()
        runs = runs.filter(query)
    if metric := metric_sort_key(f.sort):
        return order_by_metric(runs, metric, f.stat, descending=f.sort.startswith("-"))
    key = f.sort.lstrip("-")
    if key not in SORTS:
        f.sort, key = "-id", "id"
    order = F(SORTS[key]).desc(nulls_last=True) if f.sort.startswith("-") else F(SORTS[key]).asc(nulls_last=True)
    return runs.order_by(order, "-id")


def runs_page(user: User, f: RunFilter) -> Page:
    """One page of the runs table, with tags prefetched and `latest` (key -> value) on each run."""
    runs = (
        filtered_runs(user, f)
        .select_related("experiment")
        .prefetch_related("tags")
        .annotate(alert_count=_alert_count())
    )
    page = Paginator(runs, PAGE_SIZE).get_page(f.page)
    latest = column_values([run.pk for run in page.object_list], f.cols, f.stat)
    reasons = waiting_reasons(list(page.object_list))
    for run in page.object_list:
        run.latest = latest[run.pk]
        run.waiting = reasons.get(run.pk, "")
    return page


def _alert_count():
    """How many alerts fired for each run, as a subquery of the page's own query (no extra query)."""
    fired = Alert.objects.filter(run=OuterRef("pk")).order_by().values("run").annotate(n=Count("pk")).values("n")
    return Subquery(fired, output_field=IntegerField())
