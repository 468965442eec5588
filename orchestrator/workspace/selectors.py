"""Which saved view a page applies, and what the page's JavaScript needs to list and save views."""

from django.contrib.auth.models import User
from django.urls import reverse

from orchestrator.experiments.models import Project
from orchestrator.workspace.access import get_view_for_user
from orchestrator.workspace.models import SavedView


def view_to_apply(user: User, raw_id: str | None, project: Project | None) -> SavedView | None:
    """The view named by ?view=<id> (Http404 when the user may not see it), else the project's
    default view, else None."""
    if raw_id:
        return get_view_for_user(user, raw_id)
    if project is None:
        return None
    return SavedView.objects.select_related("project", "owner").filter(project=project, is_default=True).first()


def views_config(user: User, project: Project | None, applied: SavedView | None, page: str) -> dict:
    """The page's "views" entry: its project, the applied view and the API's URLs."""
    if project is None:
        return {}
    return {
        "project": project.name,
        "page": page,
        "list_url": reverse("api-project-views", args=[project.name]),
        "detail_url": reverse("api-view-detail", args=[0]).rsplit("/0", 1)[0] + "/",
        "open_url": reverse("workspace-view-open", args=[0]).rsplit("/0/", 1)[0] + "/",
        "current": applied.to_dict() if applied else None,
    }
