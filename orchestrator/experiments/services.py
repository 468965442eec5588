"""Writes on experiments and runs. Every run state change goes through `run_transition`."""

import logging
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, models, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from orchestrator.experiments.config_paths import run_reader
from orchestrator.experiments.forks import fork_plan, pin_sources, release_pins
from orchestrator.experiments.limits import limit, profile_gpus, run_gpus
from orchestrator.experiments.models import Experiment, Membership, Project, Run, RunEvent, Tag
from orchestrator.experiments.runconfig import ConfigError, MayReadRun, set_dotted, validate_run_config
from orchestrator.experiments.schemas import NAME_RE, TAG_RE
from orchestrator.experiments.signals import cancel_requested
from orchestrator.experiments.sweeps import parse_sweep, staleness_in_updates, sweep_count, sweep_points
from orchestrator.experiments.sweeps import run_name as sweep_run_name
from orchestrator.lib.bounds import INT32, MAX_NOTES, MAX_TAGS, BoundsError, check_values

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
        if to in Run.TERMINAL:
            # The sweep's row first (as experiment_cancel orders them): runs of one sweep that end
            # at once take turns, so the last of them sees the others ended and ends the sweep.
            list(Experiment.objects.select_for_update().filter(pk=run.experiment_id).values_list("pk"))
        updated = Run.objects.filter(pk=run.pk, state=frm).update(**values)
        if updated != 1:
            return False
        RunEvent.objects.create(run=run, from_state=frm, to_state=to, attempt=run.attempt, detail=reason)
        if to in Run.TERMINAL:
            _end_experiment_if_done(run.experiment_id)
        elif to == S.QUEUED:  # a retried run reopens its ended sweep
            Experiment.objects.filter(pk=run.experiment_id, state=Experiment.State.ENDED).update(
                state=Experiment.State.ACTIVE
            )
    for key, value in values.items():
        setattr(run, key, value)
    if to in RELEASES_PINS and run.parent_id:
        run_id, parent_id = run.pk, run.parent_id
        transaction.on_commit(lambda: release_pins(run_id=run_id, parent_id=parent_id), robust=True)
    log.info("run %s: %s -> %s %s", run.pk, frm, to, reason)
    return True


# A fork that ends so does not need its parent's checkpoint any more (a retry pins it again at
# submission, cluster/jobspec.py); a lost one may still be running and keeps it.
RELEASES_PINS = (S.SUCCEEDED, S.FAILED, S.CANCELLED)


def _end_experiment_if_done(experiment_id: int) -> None:
    """An active or paused experiment ends with its last run (a cancelled one stays cancelled)."""
    unfinished = Run.objects.filter(experiment_id=OuterRef("pk")).exclude(state__in=Run.TERMINAL)
    Experiment.objects.filter(pk=experiment_id, state__in=(Experiment.State.ACTIVE, Experiment.State.PAUSED)).filter(
        ~Exists(unfinished)
    ).update(state=Experiment.State.ENDED)


def project_for(name: str | None, user: User) -> Project:
    """The project a new experiment goes in: an existing one the user may add experiments to, a
    new one (the user its owner) for a name nobody has taken, or the user's personal project when
    no name is given. Naming another team's project raises Http404, as if it did not exist."""
    from orchestrator.experiments.access import check_can_add_experiments

    if not name:
        return personal_project(user)
    project = Project.objects.filter(name=name).first()
    if project is None:
        project_name_not_a_users(name, user)
        try:
            with transaction.atomic():
                return project_create(owner=user, name=name)
        except IntegrityError:  # created meanwhile by someone else: the same checks as for any existing one
            project = Project.objects.get(name=name)
    check_can_add_experiments(user, project)
    return project


def project_name_not_a_users(name: str, user: User) -> None:
    """A new project may not take another user's user name: it is the name they would reach for
    (their own project), and a project that squats it could collect what they log."""
    if User.objects.filter(username__iexact=name).exclude(pk=user.pk).exists():
        raise ConfigError(
            [{"field": "project", "message": f"{name!r} is another user's name: a new project needs another name"}]
        )


def personal_project(user: User) -> Project:
    """The user's own project, created on first use and named after them (or a free variant)."""
    if (project := Project.objects.filter(personal_for=user).first()) is not None:
        return project
    base = user.get_username() if NAME_RE.match(user.get_username()) else "user"
    base = base[:80]
    for candidate in (base, f"{base}-{user.pk}", *(f"{base}-{user.pk}-{n}" for n in range(2, 50))):
        try:
            with transaction.atomic():
                project = Project.objects.create(
                    name=candidate, personal_for=user, description=f"{user.get_username()}'s own project"
                )
                Membership.objects.create(project=project, user=user, role=Membership.Role.OWNER)
                return project
        except IntegrityError:
            if (project := Project.objects.filter(personal_for=user).first()) is not None:
                return project  # made by a concurrent request of the same user
    raise ConfigError([{"field": "project", "message": "no free name for your personal project: name one"}])


@dataclass(frozen=True)
class PlannedRun:
    name: str
    values: dict[str, Any]  # the swept fields of this run
    seed: int
    config: dict[str, Any]  # full, validated


def experiment_plan(
    *,
    name: str,
    config: dict[str, Any],
    sweep: dict[str, Any] | None = None,
    random: dict[str, Any] | None = None,
    seeds: int = 1,
    may_read_run: MayReadRun | None = None,
) -> list[PlannedRun]:
    """Expand and validate every run of an experiment without writing anything (the preview).
    `may_read_run` (config_paths.run_reader) lets its paths name files in runs the caller may read.

    Refuses a sweep larger than OPL_MAX_SWEEP_RUNS before expanding it, showing the count. A value
    the trainer would reject is reported as `sweep.<path>` with the offending value.
    """
    for part, value in (("config", config), ("sweep", sweep), ("random", random)):
        try:
            check_values(value, part)
        except BoundsError as exc:
            raise ConfigError(exc.as_errors()) from None
    spec = parse_sweep(staleness_in_updates(sweep, config), random, seeds)  # staleness.s: in updates
    count = sweep_count(spec)
    maximum = limit("OPL_MAX_SWEEP_RUNS")
    if maximum and count > maximum:
        raise ConfigError(
            [{"field": "sweep", "message": f"expands to {count} runs, more than the maximum of {maximum}"}]
        )
    base = validate_run_config(config, may_read_run=may_read_run)
    points = sweep_points(spec)
    swept = {path for path, values in spec.grid.items() if not isinstance(values, list) or len(values) > 1}
    if spec.random:
        swept |= set(spec.random.params)
    show_seed = spec.seeds > 1
    checked: dict[tuple, dict[str, Any]] = {}  # one validation per grid point, not per seed
    planned, names = [], set()
    for point in points:
        key = tuple(sorted((p, repr(v)) for p, v in point.values.items()))
        if key not in checked:
            checked[key] = _validated_point(config, point.values, may_read_run)
        seed = base["train"]["seed"] + point.seed_offset
        if not INT32[0] <= seed <= INT32[1]:  # Run.seed is a 32-bit column
            raise ConfigError(
                [
                    {
                        "field": "config.train.seed",
                        "message": f"the seeds reach {seed}; keep train.seed + seeds within 32 bits",
                    }
                ]
            )
        cfg = {**checked[key], "train": {**checked[key]["train"], "seed": seed}}
        shown = {p: v for p, v in point.values.items() if p in swept}
        run_name = unique_name(sweep_run_name(shown, cfg, seed if show_seed else None, name), names)
        planned.append(PlannedRun(name=run_name, values=point.values, seed=seed, config=cfg))
    return planned


def _validated_point(config: dict[str, Any], values: dict[str, Any], may_read_run: MayReadRun | None) -> dict[str, Any]:
    cfg = config
    for path, value in values.items():
        cfg = set_dotted(cfg, path, value)
    try:
        return validate_run_config(cfg, may_read_run=may_read_run)
    except ConfigError as exc:
        raise ConfigError(
            [
                {"field": f"sweep.{e['field']}", "message": f"value {values[e['field']]!r}: {e['message']}"}
                if e["field"] in values
                else e
                for e in exc.errors
            ]
        ) from None


def unique_name(name: str, taken: set[str]) -> str:
    name = name[:190]  # room for a "-<n>" suffix within the 200-character column
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}-{n}", n + 1
    taken.add(candidate)
    return candidate


TAG_MAX = Tag._meta.get_field("name").max_length


@transaction.atomic
def experiment_create(
    *,
    owner: User,
    name: str,
    config: dict[str, Any],
    project: str | None = None,
    sweep: dict[str, Any] | None = None,
    random: dict[str, Any] | None = None,
    seeds: int = 1,
    priority: int = 0,
    tags: list[str] | None = None,
    notes: str = "",
) -> Experiment:
    """Validate the config at every grid point and seed, then create the experiment and its
    queued runs. Nothing is created if any point is invalid. A fork (config init.from_run) is
    checked against its parent run (forks.py) and its checkpoint pinned."""
    _check_notes(notes)
    if not INT32[0] <= priority <= INT32[1]:
        raise ConfigError([{"field": "priority", "message": "must fit in 32 bits"}])
    reader = run_reader(owner)
    planned = experiment_plan(name=name, config=config, sweep=sweep, random=random, seeds=seeds, may_read_run=reader)
    forks = fork_plan(user=owner, configs=[plan.config for plan in planned])  # may raise: names the init field
    tag_rows = _tags(tags or [])
    experiment = Experiment.objects.create(
        name=name,
        project=project_for(project, owner),
        owner=owner,
        base_config=validate_run_config(config, may_read_run=reader),
        sweep=sweep or {},
        random=random or {},
        seeds=seeds,
        priority=priority,
        notes=notes,
    )
    now = timezone.now()
    fixed_gpus = profile_gpus()
    runs = Run.objects.bulk_create(
        Run(
            experiment=experiment,
            owner=owner,
            name=plan.name,
            config=fork.config,
            sweep_values=plan.values,
            seed=plan.seed,
            parent_id=fork.parent_id,
            parent_step=fork.parent_step,
            priority=priority,
            gpus=run_gpus(plan.config, fixed_gpus),
            queued_at=now,
        )
        for plan, fork in zip(planned, forks, strict=True)
    )
    pin_sources(runs, forks)  # the parents' clean-up keeps these checkpoints from now on
    if tag_rows:
        Run.tags.through.objects.bulk_create(
            Run.tags.through(run_id=run.pk, tag_id=tag.pk) for run in runs for tag in tag_rows
        )
    return experiment


def _tags(names: list[str]) -> list[Tag]:
    clean = sorted({n.strip() for n in names if n.strip()})
    if len(clean) > MAX_TAGS:
        raise ConfigError([{"field": "tags", "message": f"at most {MAX_TAGS} tags, got {len(clean)}"}])
    too_long = [n for n in clean if len(n) > TAG_MAX]
    if too_long:
        raise ConfigError([{"field": "tags", "message": f"at most {TAG_MAX} characters per tag: {too_long[0][:60]!r}"}])
    if bad := [n for n in clean if not TAG_RE.match(n)]:
        raise ConfigError(
            [{"field": "tags", "message": f"letters, digits, spaces and _ . : @ + - only: {bad[0][:60]!r}"}]
        )
    Tag.objects.bulk_create([Tag(name=n) for n in clean], ignore_conflicts=True)
    return list(Tag.objects.filter(name__in=clean))


def run_request_cancel(*, run: Run) -> bool:
    """Cancel a queued run at once; flag an active one for the cluster task to stop."""
    if run.state == S.QUEUED:
        return run_transition(run=run, to=S.CANCELLED, reason="cancelled before submission")
    if run.is_active:
        # shown at once (runs table, run page, history); the state changes when the job stops
        reason = "cancelling: asking the cluster to stop the job"
        if Run.objects.filter(pk=run.pk, cancel_requested=False).update(cancel_requested=True, state_reason=reason):
            RunEvent.objects.create(
                run=run, from_state=run.state, to_state=run.state, attempt=run.attempt, detail="cancel requested"
            )
            run.state_reason = reason
        run.cancel_requested = True
        return True
    return False


def run_stop(*, run: Run) -> bool:
    """Cancel a run on a user's request: a queued run at once, an active one through the cluster
    (signals.cancel_requested once the transaction commits; the cluster app enqueues its task).
    A run logged from outside (the `opl` SDK) has no job of ours: it is cancelled at once."""
    if run.backend == Run.EXTERNAL_BACKEND and run.is_active:
        return run_transition(run=run, to=S.CANCELLED, reason="cancelled by hand (the process logging it goes on)")
    if not run_request_cancel(run=run):
        return False
    if run.is_active:
        run_id = run.pk
        transaction.on_commit(lambda: cancel_requested.send(sender=Run, run_id=run_id))
    return True


def run_retry(*, run: Run) -> bool:
    """Put a failed, lost or cancelled run back in the queue; the cluster code starts a new
    attempt at submission."""
    if run.state not in (S.FAILED, S.LOST, S.CANCELLED) or run.experiment.state == Experiment.State.CANCELLED:
        return False  # a cancelled sweep never dispatches again
    if run.backend == Run.EXTERNAL_BACKEND:
        return False  # logged from outside: no config of ours to run again
    return run_transition(run=run, to=S.QUEUED, reason="retried by hand")


def run_set_priority(*, run: Run, priority: int) -> bool:
    """Change a queued run's priority; once submitted it is too late."""
    updated = Run.objects.filter(pk=run.pk, state=S.QUEUED).update(priority=priority)
    if updated:
        run.priority = priority
    return bool(updated)


def run_move_to_top(*, run: Run) -> bool:
    """Make a queued run the next of its owner's runs: the highest priority among them, and
    first among equals."""
    top = Run.objects.filter(owner_id=run.owner_id, state=S.QUEUED).aggregate(m=models.Max("priority"))["m"]
    priority = max(run.priority, top if top is not None else run.priority)
    now = timezone.now()
    updated = Run.objects.filter(pk=run.pk, state=S.QUEUED).update(priority=priority, moved_to_top_at=now)
    if updated:
        run.priority, run.moved_to_top_at = priority, now
    return bool(updated)


def run_set_tags(*, run: Run, tags: list[str]) -> list[str]:
    run.tags.set(_tags(tags))
    return sorted(t.name for t in run.tags.all())


def _check_notes(notes: str) -> None:
    if len(notes) > MAX_NOTES or "\x00" in notes:
        raise ConfigError([{"field": "notes", "message": f"at most {MAX_NOTES} characters, no NUL"}])


def run_set_notes(*, run: Run, notes: str) -> None:
    _check_notes(notes)
    Run.objects.filter(pk=run.pk).update(notes=notes)
    run.notes = notes


# --- experiments (sweeps) ----------------------------------------------------------------------


def experiment_pause(*, experiment: Experiment) -> bool:
    """Submit nothing new from this sweep; runs already submitted go on."""
    return _experiment_state(experiment, frm=Experiment.State.ACTIVE, to=Experiment.State.PAUSED)


def experiment_resume(*, experiment: Experiment) -> bool:
    return _experiment_state(experiment, frm=Experiment.State.PAUSED, to=Experiment.State.ACTIVE)


def experiment_cancel(*, experiment: Experiment) -> int:
    """Cancel the sweep: its queued runs at once, its active runs through the cluster. Returns
    how many runs were cancelled or asked to stop. An ended sweep has nothing left to cancel."""
    if experiment.state in (Experiment.State.CANCELLED, Experiment.State.ENDED):
        return 0
    Experiment.objects.filter(pk=experiment.pk).update(state=Experiment.State.CANCELLED)
    experiment.state = Experiment.State.CANCELLED
    stopped = 0
    for run in experiment.runs.filter(state__in=(S.QUEUED, *Run.ACTIVE)).order_by("id"):
        stopped += run_stop(run=run)
    return stopped


def experiment_set_priority(*, experiment: Experiment, priority: int) -> int:
    """Set the sweep's priority and that of its runs still queued; returns how many changed."""
    Experiment.objects.filter(pk=experiment.pk).update(priority=priority)
    experiment.priority = priority
    return experiment.runs.filter(state=S.QUEUED).update(priority=priority)


def _experiment_state(experiment: Experiment, *, frm: str, to: str) -> bool:
    updated = Experiment.objects.filter(pk=experiment.pk, state=frm).update(state=to)
    if updated:
        experiment.state = to
    return bool(updated)


# --- projects ----------------------------------------------------------------------------------


def project_create(*, owner: User, name: str, description: str = "") -> Project:
    project = Project.objects.create(name=name, description=description)
    Membership.objects.create(project=project, user=owner, role=Membership.Role.OWNER)
    return project


def project_add_member(*, project: Project, user: User, role: str = Membership.Role.MEMBER) -> None:
    """Add the user with the role, or change the role of a member; the last owner stays owner."""
    if role != Membership.Role.OWNER:
        _keep_an_owner(project, user)
    Membership.objects.update_or_create(project=project, user=user, defaults={"role": role})


def project_remove_member(*, project: Project, user: User) -> None:
    _keep_an_owner(project, user)
    Membership.objects.filter(project=project, user=user).delete()


class LastOwnerError(ValueError):
    pass


def _keep_an_owner(project: Project, leaving: User) -> None:
    owners = set(
        Membership.objects.filter(project=project, role=Membership.Role.OWNER).values_list("user_id", flat=True)
    )
    if owners == {leaving.pk}:
        raise LastOwnerError(
            f"{leaving.get_username()} is the last owner of {project.name}: make someone else owner first"
        )


def project_set_limits(*, project: Project, max_active_runs: int | None, max_gpus: int | None) -> None:
    Project.objects.filter(pk=project.pk).update(max_active_runs=max_active_runs, max_gpus=max_gpus)
    project.max_active_runs, project.max_gpus = max_active_runs, max_gpus
