"""Who may see and change what.

Projects are private: only their members (and staff) see them or anything in them. Within a
project, owners manage members and roles, members run experiments and change their own runs and
experiments, viewers only read. Staff see and change everything."""

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from orchestrator.experiments.models import Experiment, Membership, Project, Run, Tag
from orchestrator.lib.bounds import SAFE_NAME


def visible_projects(user: User) -> QuerySet[Project]:
    return Project.objects.all() if user.is_staff else Project.objects.filter(members=user)


def visible_runs(user: User) -> QuerySet[Run]:
    runs = Run.objects.select_related("experiment", "experiment__project", "owner")
    if user.is_staff:
        return runs
    # A subquery, not a join: no duplicate rows, so no DISTINCT over the whole table.
    return runs.filter(experiment__project_id__in=Project.objects.filter(members=user).values("id"))


def visible_experiments(user: User) -> QuerySet[Experiment]:
    experiments = Experiment.objects.select_related("project", "owner")
    if user.is_staff:
        return experiments
    return experiments.filter(project_id__in=Project.objects.filter(members=user).values("id"))


def visible_tags(user: User) -> QuerySet:
    """Names of the tags on runs the user can see (tags of other teams' projects stay private)."""
    used = Run.tags.through.objects.filter(run_id__in=visible_runs(user).values("id")).values("tag_id")
    return Tag.objects.filter(pk__in=used).order_by("name").values_list("name", flat=True)


def role_in(user: User, project_id: int) -> str | None:
    """The user's role in the project, None when not a member."""
    return Membership.objects.filter(project_id=project_id, user_id=user.pk).values_list("role", flat=True).first()


def can_write(user: User, owner_id: int, project_id: int | None = None) -> bool:
    """Whether the user may change a run or experiment owned by owner_id; given its project, also
    that the user is no mere viewer there (what the get_*_for_user helpers enforce on write)."""
    if user.is_staff:
        return True
    if owner_id != user.pk:
        return False
    return project_id is None or role_in(user, project_id) in Membership.WRITERS


def can_cancel(user: User, run: Run) -> bool:
    """Whether the user may cancel the run: one they may change, or any run of a project they own
    (what get_run_to_cancel enforces)."""
    project_id = run.experiment.project_id
    return can_write(user, run.owner_id, project_id) or role_in(user, project_id) == Membership.Role.OWNER


def _check_write(user: User, owner_id: int, project_id: int, what: str, owner: User) -> None:
    if user.is_staff:
        return
    if owner_id != user.pk:
        raise PermissionDenied(f"{what} belongs to {owner.get_username()}")
    if role_in(user, project_id) not in Membership.WRITERS:
        raise PermissionDenied(f"{what}: viewers of its project cannot change it")


def get_run_for_user(user: User, run_id: int, *, write: bool = False) -> Run:
    run = visible_runs(user).filter(pk=run_id).first()
    if run is None:
        raise Http404(f"run {run_id} does not exist")
    if write:
        _check_write(user, run.owner_id, run.experiment.project_id, f"run {run_id}", run.owner)
    return run


def get_run_to_cancel(user: User, run_id: int) -> Run:
    """A run the user may cancel: one they may change, or any run in a project they own (an owner
    stops a member's run, and with it what that run's token writes into the project)."""
    run = visible_runs(user).filter(pk=run_id).first()
    if run is None:
        raise Http404(f"run {run_id} does not exist")
    if role_in(user, run.experiment.project_id) != Membership.Role.OWNER:
        _check_write(user, run.owner_id, run.experiment.project_id, f"run {run_id}", run.owner)
    return run


def cancellable(user: User, runs) -> set[int]:
    """The ids of `runs` (with owner_id and experiment.project_id) that the user may cancel, as
    get_run_to_cancel decides one by one, with the user's roles read in one query."""
    runs = list(runs)
    if user.is_staff:
        return {r.pk for r in runs}
    projects = {r.experiment.project_id for r in runs}
    roles = dict(Membership.objects.filter(user_id=user.pk, project_id__in=projects).values_list("project_id", "role"))
    return {
        r.pk
        for r in runs
        if roles.get(r.experiment.project_id) == Membership.Role.OWNER
        or (r.owner_id == user.pk and roles.get(r.experiment.project_id) in Membership.WRITERS)
    }


def get_experiment_for_user(user: User, experiment_id: int, *, write: bool = False) -> Experiment:
    experiment = visible_experiments(user).filter(pk=experiment_id).first()
    if experiment is None:
        raise Http404(f"experiment {experiment_id} does not exist")
    if write:
        _check_write(user, experiment.owner_id, experiment.project_id, f"experiment {experiment_id}", experiment.owner)
    return experiment


def get_project_for_user(user: User, name: str, *, manage: bool = False) -> Project:
    """The project if the user is a member (404 otherwise, so names of others' projects do not
    leak); with manage=True only its owners and staff get it (403 for other members)."""
    project = visible_projects(user).filter(name=name).first() if SAFE_NAME.match(name) else None
    if project is None:
        raise Http404(f"project {name!r} does not exist or you are not a member")
    if manage and not user.is_staff and role_in(user, project.pk) != Membership.Role.OWNER:
        raise PermissionDenied(f"project {name!r}: only its owners change members and roles")
    return project


def check_can_add_experiments(user: User, project: Project) -> None:
    """Raise unless the user may create experiments in this existing project."""
    if user.is_staff:
        return
    role = role_in(user, project.pk)
    if role is None:
        raise Http404(f"project {project.name!r} does not exist or you are not a member; a new name creates a project")
    if role not in Membership.WRITERS:
        raise PermissionDenied(f"project {project.name!r}: viewers cannot add experiments")
