"""Who may see and change what: users see everything in their projects; they change only their
own runs, unless they are staff."""
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from orchestrator.experiments.models import Run


def visible_runs(user: User) -> QuerySet[Run]:
    runs = Run.objects.select_related("experiment", "experiment__project", "owner")
    if user.is_staff:
        return runs
    return runs.filter(experiment__project__members=user).distinct()


def get_run_for_user(user: User, run_id: int, *, write: bool = False) -> Run:
    run = visible_runs(user).filter(pk=run_id).first()
    if run is None:
        raise Http404(f"run {run_id} does not exist")
    if write and not (user.is_staff or run.owner_id == user.pk):
        raise PermissionDenied(f"run {run_id} belongs to {run.owner.get_username()}")
    return run
