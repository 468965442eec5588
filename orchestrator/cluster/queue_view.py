"""The cluster page's queue: the queued runs a user may see, in the order the dispatcher picks
them, each with its place and why it waits; the runs submitted to the backend but not yet running
(with the backend's pending reason); and each project's use of its quota."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, Q, Sum

from orchestrator.experiments.access import cancellable, visible_projects, visible_runs
from orchestrator.experiments.limits import limit
from orchestrator.experiments.models import Run
from orchestrator.experiments.queue import ordinal, queue_positions, waiting_reasons

MAX_SHOWN = 200  # queued runs listed; the count says how many more


@dataclass(frozen=True)
class ProjectQuota:
    name: str
    active: int
    max_active: int | None  # None: no limit
    gpus: int
    max_gpus: int | None
    queued: int


def cluster_queue(user) -> dict:
    """{"queued": [(place or None, run, reason)], "more", "waiting": [run], "running": [run],
    "may_cancel": {run id}, "projects": [ProjectQuota], "active", "limit", "backend"}. Places count
    every user's runs (the line is shared)."""
    places = queue_positions()
    queued = list(
        visible_runs(user)
        .filter(state=Run.State.QUEUED)
        .select_related("owner", "experiment__project")
        .order_by("-priority", "id")
    )
    queued.sort(key=lambda r: (places.get(r.pk) is None, places.get(r.pk, 0), -r.priority, r.pk))
    shown = queued[:MAX_SHOWN]
    reasons = waiting_reasons(shown)
    waiting = list(
        visible_runs(user)
        .filter(state__in=[Run.State.SUBMITTED, Run.State.PENDING])
        .select_related("owner", "experiment__project")
        .order_by("id")[:MAX_SHOWN]
    )
    running = list(
        visible_runs(user)
        .filter(state=Run.State.RUNNING)
        .exclude(backend="external")
        .select_related("owner", "experiment__project")
        .order_by("id")[:MAX_SHOWN]
    )
    may_cancel = cancellable(user, [*shown, *waiting, *running])
    return {
        "queued": [(places.get(r.pk), r, _without_place(reasons.get(r.pk, ""), places.get(r.pk))) for r in shown],
        "more": len(queued) - len(shown),
        "waiting": waiting,
        "running": running,
        "may_cancel": may_cancel,
        "projects": project_quotas(user),
        "active": Run.objects.filter(state__in=Run.ACTIVE).exclude(backend="external").count(),
        "limit": settings.MAX_ACTIVE_RUNS,
        "backend": settings.CLUSTER_BACKEND,
    }


def project_quotas(user) -> list[ProjectQuota]:
    """Active runs and GPUs held against each visible project's limits, and its queued runs (two queries)."""
    projects = list(visible_projects(user).order_by("name"))
    held = Q(experiments__runs__state__in=Run.ACTIVE) & ~Q(experiments__runs__backend="external")
    counts = {
        p["id"]: p
        for p in visible_projects(user)
        .values("id")
        .annotate(
            active=Count("experiments__runs", filter=held),
            gpus=Sum("experiments__runs__gpus", filter=held),
            queued=Count("experiments__runs", filter=Q(experiments__runs__state=Run.State.QUEUED)),
        )
    }
    default_runs, default_gpus = limit("OPL_PROJECT_MAX_ACTIVE_RUNS"), limit("OPL_PROJECT_MAX_GPUS")
    empty = Counter()
    return [
        ProjectQuota(
            name=p.name,
            active=counts.get(p.pk, empty)["active"] or 0,
            max_active=(p.max_active_runs if p.max_active_runs is not None else default_runs) or None,
            gpus=counts.get(p.pk, empty)["gpus"] or 0,
            max_gpus=(p.max_gpus if p.max_gpus is not None else default_gpus) or None,
            queued=counts.get(p.pk, empty)["queued"] or 0,
        )
        for p in projects
    ]


def _without_place(reason: str, place: int | None) -> str:
    """ "3rd; waiting: cluster full 2/2" -> "waiting: cluster full 2/2": the table has a place column."""
    prefix = f"{ordinal(place)}; " if place else ""
    return reason[len(prefix) :] if prefix and reason.startswith(prefix) else reason
