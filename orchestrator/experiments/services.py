"""Writes on experiments and runs. Every run state change goes through `run_transition`."""
import itertools
import logging
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from orchestrator.experiments.models import Experiment, Project, Run, RunEvent
from orchestrator.experiments.runconfig import ConfigError, set_dotted, validate_run_config

log = logging.getLogger(__name__)

S = Run.State
# Which states a run may move to from each state. Requeue (back to queued) is allowed from the
# active states (the cluster failed the job) and from the terminal failures (retry by hand).
ALLOWED = {
    S.QUEUED: {S.SUBMITTED, S.CANCELLED, S.FAILED},
    S.SUBMITTED: {S.PENDING, S.RUNNING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.QUEUED, S.LOST},
    S.PENDING: {S.RUNNING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.QUEUED, S.LOST},
    S.RUNNING: {S.SUCCEEDED, S.FAILED, S.CANCELLED, S.QUEUED, S.LOST},
    S.SUCCEEDED: set(),
    S.FAILED: {S.QUEUED},
    S.CANCELLED: {S.QUEUED},
    S.LOST: {S.QUEUED, S.SUCCEEDED, S.FAILED, S.CANCELLED},
}
TIMESTAMP_FIELD = {
    S.QUEUED: "queued_at",
    S.SUBMITTED: "submitted_at",
    S.PENDING: "pending_at",
    S.RUNNING: "started_at",
    S.SUCCEEDED: "finished_at",
    S.FAILED: "finished_at",
    S.CANCELLED: "finished_at",
    S.LOST: "finished_at",
}


class InvalidTransition(Exception):
    pass


def run_transition(*, run: Run, to: str, reason: str = "", **fields: Any) -> bool:
    """Move run from its current state (as loaded) to `to`, atomically.

    The UPDATE is conditional on the state we loaded, so two workers racing on the same run
    cannot both apply a transition: the loser gets False and changes nothing. Extra `fields`
    (job_id, exit_code, ...) are written in the same UPDATE. On success `run` is updated in place.
    """
    frm = run.state
    if to not in ALLOWED[frm]:
        raise InvalidTransition(f"run {run.pk}: {frm} -> {to} is not allowed")
    now = timezone.now()
    values = {"state": to, "state_reason": reason, TIMESTAMP_FIELD[to]: now, **fields}
    if to == S.QUEUED:
        values.update(finished_at=None, cancel_requested=False)
    with transaction.atomic():
        updated = Run.objects.filter(pk=run.pk, state=frm).update(**values)
        if updated != 1:
            return False
        RunEvent.objects.create(run=run, from_state=frm, to_state=to, attempt=run.attempt, detail=reason)
    for key, value in values.items():
        setattr(run, key, value)
    log.info("run %s: %s -> %s %s", run.pk, frm, to, reason)
    return True


def project_for(name: str, user: User) -> Project:
    project, _ = Project.objects.get_or_create(name=name or "default")
    project.members.add(user)
    return project


def expand_grid(sweep: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The cartesian product of a sweep {dotted.path: [values]} as a list of grid points."""
    if not sweep:
        return [{}]
    for path, values in sweep.items():
        if not isinstance(values, list) or not values:
            raise ConfigError([{"field": f"sweep.{path}", "message": "must be a non-empty list of values"}])
    paths = list(sweep)
    return [dict(zip(paths, combo)) for combo in itertools.product(*(sweep[p] for p in paths))]


def run_name(base: str, point: dict[str, Any], seed: int, seeds: int) -> str:
    parts = [base] + [f"{path.rsplit('.', 1)[-1]}{value}" for path, value in point.items()]
    if seeds > 1:
        parts.append(f"seed{seed}")
    return "-".join(str(p) for p in parts)


@transaction.atomic
def experiment_create(
    *,
    owner: User,
    name: str,
    config: dict[str, Any],
    project: str = "default",
    sweep: dict[str, list[Any]] | None = None,
    seeds: int = 1,
    priority: int = 0,
) -> Experiment:
    """Validate the config at every grid point and seed, then create the experiment and its
    queued runs. Nothing is created if any point is invalid."""
    sweep = sweep or {}
    if seeds < 1:
        raise ConfigError([{"field": "seeds", "message": "must be at least 1"}])
    base = validate_run_config(config)
    first_seed = base["train"]["seed"]
    planned = []
    for point in expand_grid(sweep):
        for offset in range(seeds):
            seed = first_seed + offset
            cfg = config
            for path, value in point.items():
                cfg = set_dotted(cfg, path, value)
            cfg = set_dotted(cfg, "train.seed", seed)
            planned.append((point, seed, validate_run_config(cfg)))
    experiment = Experiment.objects.create(
        name=name,
        project=project_for(project, owner),
        owner=owner,
        base_config=base,
        sweep=sweep,
        seeds=seeds,
        priority=priority,
    )
    now = timezone.now()
    Run.objects.bulk_create(
        Run(
            experiment=experiment,
            owner=owner,
            name=run_name(name, point, seed, seeds),
            config=cfg,
            sweep_values=point,
            seed=seed,
            priority=priority,
            queued_at=now,
        )
        for point, seed, cfg in planned
    )
    return experiment


def run_request_cancel(*, run: Run) -> bool:
    """Cancel a queued run at once; flag an active one for the cluster task to stop."""
    if run.state == S.QUEUED:
        return run_transition(run=run, to=S.CANCELLED, reason="cancelled before submission")
    if run.is_active:
        Run.objects.filter(pk=run.pk).update(cancel_requested=True)
        run.cancel_requested = True
        return True
    return False
