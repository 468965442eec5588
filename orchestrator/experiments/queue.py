"""Which queued runs the dispatcher submits next: the lab's queue policy.

1. Higher priority first. Within one priority, users take turns: the user with the fewest active
   runs (counting those picked in this round) goes next, so two users who both queue large sweeps
   share the cluster evenly, and a newcomer's first run overtakes a 500-run sweep.
2. Within one user: highest priority, then the runs moved to the top (newest move first), then the
   oldest.
3. Limits: a global cap on active runs (MAX_ACTIVE_RUNS) and on GPUs (OPL_MAX_GPUS), and per user
   and per project caps on active runs and on GPUs (a project's own limits override the site
   default). A run that does not fit its limits waits; it does not block other users' runs.
4. Paused or cancelled experiments submit nothing.
5. A fork waits until its parent has written the checkpoint it starts from (forks.py).
"""

import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, F, Sum

from orchestrator.experiments.forks import held_by_parent, waiting_for_parent
from orchestrator.experiments.limits import limit
from orchestrator.experiments.models import Experiment, Project, Run


@dataclass
class Usage:
    """Active runs and GPUs held, per user and per project, updated as runs are picked."""

    runs: Counter
    gpus: Counter

    def add(self, key, gpus: int) -> None:
        self.runs[key] += 1
        self.gpus[key] += gpus


def _holding_slots():
    """Active runs that hold a place in the queue: not those logged from outside (the `opl` SDK),
    which run on nobody's slot."""
    return Run.objects.filter(state__in=Run.ACTIVE).exclude(backend=Run.EXTERNAL_BACKEND)


def _usage(group_by: str) -> Usage:
    rows = _holding_slots().values(group_by).annotate(n=Count("id"), g=Sum("gpus"))
    return Usage(Counter({r[group_by]: r["n"] for r in rows}), Counter({r[group_by]: r["g"] or 0 for r in rows}))


def _fits(usage: Usage, key, gpus: int, max_runs: int, max_gpus: int) -> bool:
    if max_runs and usage.runs[key] + 1 > max_runs:
        return False
    return not (max_gpus and gpus and usage.gpus[key] + gpus > max_gpus)


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def queue_order(rows: list[tuple[int, int, int]], active_by_user: Counter) -> list[int]:
    """The order in which the dispatcher picks queued runs when no limit holds any of them:
    priority first, then users take turns (fewest active runs first, counting the runs picked
    before), each user's runs in their own order. `rows`: (run id, owner id, priority), already
    in each user's own order (moved-to-top first, then oldest)."""
    active = Counter(active_by_user)
    levels: dict[int, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for run_id, owner, priority in rows:
        levels[priority][owner].append(run_id)
    order: list[int] = []
    for priority in sorted(levels, reverse=True):
        per_user = levels[priority]
        heap = [(active[owner], runs[0], owner, 0) for owner, runs in per_user.items()]
        heapq.heapify(heap)
        while heap:
            _, _, owner, i = heapq.heappop(heap)
            order.append(per_user[owner][i])
            active[owner] += 1
            if i + 1 < len(per_user[owner]):
                heapq.heappush(heap, (active[owner], per_user[owner][i + 1], owner, i + 1))
    return order


def queue_positions(active_by_user: Counter | None = None) -> dict[int, int]:
    """{run id: 1-based place in the queue} for every queued run that the dispatcher may pick
    (active experiment, not held by its parent). One query over the queued runs (and one for the
    active runs per user unless given)."""
    rows = list(
        Run.objects.filter(state=Run.State.QUEUED, experiment__state=Experiment.State.ACTIVE)
        .exclude(waiting_for_parent())
        .order_by("-priority", F("moved_to_top_at").desc(nulls_last=True), "id")
        .values_list("id", "owner_id", "priority")
    )
    order = queue_order(rows, _usage("owner_id").runs if active_by_user is None else active_by_user)
    return {run_id: i + 1 for i, run_id in enumerate(order)}


def waiting_reasons(runs: list[Run]) -> dict[int, str]:
    """Why each queued run is still waiting, in plain words, for the runs table and the run page:
    its place in the queue and the limit it is held by, e.g. "3rd; waiting: cluster full 4/4".
    Two aggregate queries and one over the queued runs, whatever the number of runs."""
    queued = [run for run in runs if run.state == Run.State.QUEUED]
    if not queued:
        return {}
    users, projects = _usage("owner_id"), _usage("experiment__project_id")
    reasons = _limits(queued, users, projects)
    places = queue_positions(users.runs)
    free = max(0, settings.MAX_ACTIVE_RUNS - sum(users.runs.values()))
    for run in queued:
        place = places.get(run.pk)
        if place is None:  # paused sweep or waiting for a parent: not in line at all
            continue
        reason = reasons[run.pk]
        if reason == NEXT:
            ahead = place - free
            reasons[run.pk] = (
                f"{ordinal(place)}; starts at the next dispatch ({free} free)"
                if ahead <= 0
                else f"{ordinal(place)}; waiting: {ahead} ahead for {free} free slot{'s' if free != 1 else ''}"
            )
        else:
            reasons[run.pk] = f"{ordinal(place)}; waiting: {reason}"
    return reasons


NEXT = "next in line"


def _limits(queued: list[Run], users: Usage, projects: Usage) -> dict[int, str]:
    """The first limit holding each queued run, or NEXT when none does."""
    active = sum(users.runs.values())
    reasons = held_by_parent(queued)
    for run in queued:
        if run.pk in reasons:
            continue
        project = run.experiment.project
        project_runs = (
            project.max_active_runs if project.max_active_runs is not None else limit("OPL_PROJECT_MAX_ACTIVE_RUNS")
        )
        project_gpus = project.max_gpus if project.max_gpus is not None else limit("OPL_PROJECT_MAX_GPUS")
        if run.experiment.state != Experiment.State.ACTIVE:
            reasons[run.pk] = f"sweep {run.experiment.state}"
        elif limit("OPL_USER_MAX_ACTIVE_RUNS") and users.runs[run.owner_id] >= limit("OPL_USER_MAX_ACTIVE_RUNS"):
            reasons[run.pk] = f"user limit: {users.runs[run.owner_id]} runs active"
        elif (
            run.gpus and limit("OPL_USER_MAX_GPUS") and users.gpus[run.owner_id] + run.gpus > limit("OPL_USER_MAX_GPUS")
        ):
            reasons[run.pk] = f"user GPU limit: {users.gpus[run.owner_id]} of {limit('OPL_USER_MAX_GPUS')} GPUs in use"
        elif project_runs and projects.runs[project.pk] >= project_runs:
            reasons[run.pk] = f"project limit: {projects.runs[project.pk]} runs active"
        elif run.gpus and project_gpus and projects.gpus[project.pk] + run.gpus > project_gpus:
            reasons[run.pk] = f"project GPU limit: {projects.gpus[project.pk]} of {project_gpus} GPUs in use"
        elif active >= settings.MAX_ACTIVE_RUNS:
            reasons[run.pk] = f"cluster full {active}/{settings.MAX_ACTIVE_RUNS}"
        else:
            reasons[run.pk] = NEXT
    return reasons


def runs_to_dispatch() -> list[int]:
    """Ids of the queued runs to submit now, in order (see the module docstring)."""
    active = _holding_slots().aggregate(n=Count("id"), g=Sum("gpus"))
    capacity = settings.MAX_ACTIVE_RUNS - active["n"]
    if capacity <= 0:
        return []
    gpus_free = limit("OPL_MAX_GPUS") - (active["g"] or 0) if limit("OPL_MAX_GPUS") else None

    queued = list(
        Run.objects.filter(state=Run.State.QUEUED, experiment__state=Experiment.State.ACTIVE)
        .exclude(waiting_for_parent())
        .order_by("-priority", F("moved_to_top_at").desc(nulls_last=True), "id")
        .values_list("id", "owner_id", "experiment__project_id", "priority", "gpus")
    )
    if not queued:
        return []
    users, projects = _usage("owner_id"), _usage("experiment__project_id")
    project_limits = {
        p["id"]: p
        for p in Project.objects.filter(id__in={q[2] for q in queued}).values("id", "max_active_runs", "max_gpus")
    }
    user_runs, user_gpus = limit("OPL_USER_MAX_ACTIVE_RUNS"), limit("OPL_USER_MAX_GPUS")
    default_project_runs, default_project_gpus = limit("OPL_PROJECT_MAX_ACTIVE_RUNS"), limit("OPL_PROJECT_MAX_GPUS")

    def fits(owner, project, gpus) -> bool:
        if gpus_free is not None and gpus > gpus_free:
            return False
        p = project_limits[project]
        return _fits(users, owner, gpus, user_runs, user_gpus) and _fits(
            projects,
            project,
            gpus,
            p["max_active_runs"] if p["max_active_runs"] is not None else default_project_runs,
            p["max_gpus"] if p["max_gpus"] is not None else default_project_gpus,
        )

    levels: dict[int, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for run_id, owner, project, priority, gpus in queued:  # already in each user's own order
        levels[priority][owner].append((run_id, project, gpus))

    picked: list[int] = []
    for priority in sorted(levels, reverse=True):
        per_user = levels[priority]
        cursor = dict.fromkeys(per_user, 0)
        # (active runs of the user, id of the user's next run): fewest active first, then oldest
        heap = [(users.runs[owner], runs[0][0], owner) for owner, runs in per_user.items()]
        heapq.heapify(heap)
        while heap and len(picked) < capacity:
            _, _, owner = heapq.heappop(heap)
            runs, i = per_user[owner], cursor[owner]
            while i < len(runs) and not fits(owner, runs[i][1], runs[i][2]):
                i += 1  # blocked by a limit (e.g. a GPU run over the GPU cap): try the user's next run
            if i == len(runs):
                continue  # nothing of this user fits now
            run_id, project, gpus = runs.pop(i)
            picked.append(run_id)
            users.add(owner, gpus)
            projects.add(project, gpus)
            if gpus_free is not None:
                gpus_free -= gpus
            cursor[owner] = i  # the runs skipped before i stay blocked this round: usage only grows
            if i < len(runs):
                heapq.heappush(heap, (users.runs[owner], runs[i][0], owner))
        if len(picked) >= capacity:
            break
    return picked
