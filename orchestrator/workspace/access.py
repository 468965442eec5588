"""Who may see and change a saved view. Members (and staff) read the project's views; owners and
members save new ones; a view is changed or deleted by its author or an owner of the project;
the project's default view, applied to every run page of the project, is chosen by owners only.
Anyone else gets a 404."""

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404

from orchestrator.experiments.access import role_in, visible_projects
from orchestrator.experiments.models import Membership, Project
from orchestrator.lib.bounds import parse_id
from orchestrator.workspace.models import SavedView
from orchestrator.workspace.services import ViewRefused


def visible_views(user: User):
    return SavedView.objects.select_related("project", "owner").filter(project__in=visible_projects(user))


def check_can_write(user: User, project: Project) -> None:
    if not user.is_staff and role_in(user, project.pk) not in Membership.WRITERS:
        raise PermissionDenied(f"project {project.name!r}: viewers cannot save or change views")


def is_project_owner(user: User, project: Project) -> bool:
    return user.is_staff or role_in(user, project.pk) == Membership.Role.OWNER


def check_can_change(user: User, view: SavedView) -> None:
    """Its author or an owner of its project edits or deletes a view; the default view, only an owner."""
    check_can_write(user, view.project)
    if view.is_default and not is_project_owner(user, view.project):
        raise ViewRefused("default", f"view {view.name!r} is the project's default: only its owners change it", 403)
    if view.owner_id != user.pk and not is_project_owner(user, view.project):
        author = view.owner.get_username() if view.owner else "a former member"
        message = f"view {view.name!r} is {author}'s: only its author or the project's owners change it"
        raise ViewRefused("id", message, 403)


def check_can_set_default(user: User, project: Project) -> None:
    if not is_project_owner(user, project):
        raise ViewRefused("default", f"only the owners of project {project.name!r} choose its default view", 403)


def get_view_for_user(user: User, view_id: int | str, *, write: bool = False) -> SavedView:
    pk = parse_id(str(view_id))
    view = visible_views(user).filter(pk=pk).first() if pk is not None else None
    if view is None:
        raise Http404(f"view {str(view_id)[:40]} does not exist")
    if write:
        check_can_change(user, view)
    return view
