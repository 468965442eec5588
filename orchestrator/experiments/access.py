"""Who may see and change what: users see everything in their projects; they change only their
own runs and experiments, unless they are staff."""
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from orchestrator.experiments.models import Experiment, Project, Run


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


def can_write(user: User, owner_id: int) -> bool:
    return user.is_staff or owner_id == user.pk


def get_run_for_user(user: User, run_id: int, *, write: bool = False) -> Run:
    run = visible_runs(user).filter(pk=run_id).first()
    if run is None:
        raise Http404(f"run {run_id} does not exist")
    if write and not can_write(user, run.owner_id):
        raise PermissionDenied(f"run {run_id} belongs to {run.owner.get_username()}")
    return run


def get_experiment_for_user(user: User, experiment_id: int, *, write: bool = False) -> Experiment:
    experiment = visible_experiments(user).filter(pk=experiment_id).first()
    if experiment is None:
        raise Http404(f"experiment {experiment_id} does not exist")
    if write and not can_write(user, experiment.owner_id):
        raise PermissionDenied(f"experiment {experiment_id} belongs to {experiment.owner.get_username()}")
    return experiment


def get_project_for_user(user: User, name: str) -> Project:
    project = visible_projects(user).filter(name=name).first()
    if project is None:
        raise Http404(f"project {name!r} does not exist or you are not a member")
    return project
