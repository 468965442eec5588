"""Who may see and change a saved view: the same rules as the project's experiments. Members
(and staff) read; owners and members of the project write; anyone else gets a 404."""

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404

from orchestrator.experiments.access import role_in, visible_projects
from orchestrator.experiments.bounds import parse_id
from orchestrator.experiments.models import Membership, Project
from orchestrator.workspace.models import SavedView


def visible_views(user: User):
    return SavedView.objects.select_related("project", "owner").filter(project__in=visible_projects(user))


def check_can_write(user: User, project: Project) -> None:
    if not user.is_staff and role_in(user, project.pk) not in Membership.WRITERS:
        raise PermissionDenied(f"project {project.name!r}: viewers cannot save or change views")


def get_view_for_user(user: User, view_id: int | str, *, write: bool = False) -> SavedView:
    pk = parse_id(str(view_id))
    view = visible_views(user).filter(pk=pk).first() if pk is not None else None
    if view is None:
        raise Http404(f"view {str(view_id)[:40]} does not exist")
    if write:
        check_can_write(user, view.project)
    return view
