"""Writes of saved views. The one-default-per-project rule is a constraint; setting a new default
clears the old one in the same transaction. A view's state and a project's views are bounded
(settings.OPL_VIEW_MAX_BYTES, OPL_VIEWS_PER_PROJECT): every run and compare page of the project
loads its list, and the default view is applied to every run page."""

import json

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from orchestrator.experiments.models import Project
from orchestrator.workspace.models import SavedView


class ViewNameTaken(ValueError):
    pass


class ViewRefused(ValueError):
    """A write over a bound (400) or beyond the writer's role (403), naming the field."""

    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(f"{field}: {message}")
        self.field, self.message, self.status = field, message, status


def state_size(state: dict) -> int:
    return len(json.dumps(state, separators=(",", ":")).encode())


def _state_fits(state: dict) -> None:
    size, limit = state_size(state), settings.OPL_VIEW_MAX_BYTES
    if size > limit:
        raise ViewRefused(
            "state", f"{size:,} bytes as JSON, over the {limit:,} a saved view may hold (OPL_VIEW_MAX_BYTES)"
        )


def _room_for_another(project: Project) -> None:
    Project.objects.select_for_update().filter(pk=project.pk).first()  # concurrent saves count in turn
    count, limit = SavedView.objects.filter(project=project).count(), settings.OPL_VIEWS_PER_PROJECT
    if count >= limit:
        raise ViewRefused(
            "project",
            f"project {project.name!r} keeps {count} saved views, the most a project may (OPL_VIEWS_PER_PROJECT): "
            "delete one or save over an existing one",
        )


def _clear_default(project: Project, keep: int | None = None) -> None:
    SavedView.objects.filter(project=project, is_default=True).exclude(pk=keep).update(is_default=False)


def _name_free(project: Project, name: str, pk: int | None = None) -> None:
    if SavedView.objects.filter(project=project, name=name).exclude(pk=pk).exists():
        raise ViewNameTaken(f"project {project.name!r} already has a view named {name!r}")


@transaction.atomic
def view_create(*, project: Project, owner: User, name: str, state: dict, page: str = "", default: bool = False):
    _state_fits(state)
    _room_for_another(project)
    _name_free(project, name)
    if default:
        _clear_default(project)
    return SavedView.objects.create(project=project, owner=owner, name=name, state=state, page=page, is_default=default)


@transaction.atomic
def view_update(*, view: SavedView, changes: dict) -> SavedView:
    """`changes`: any of name, page, state, default (as ViewPatchIn gives them)."""
    if "state" in changes:
        _state_fits(changes["state"])
    if "name" in changes:
        _name_free(view.project, changes["name"], view.pk)
        view.name = changes["name"]
    if "page" in changes:
        view.page = changes["page"]
    if "state" in changes:
        view.state = changes["state"]
    if "default" in changes:
        if changes["default"]:
            _clear_default(view.project, keep=view.pk)
        view.is_default = changes["default"]
    view.save()
    return view


def view_delete(*, view: SavedView) -> None:
    view.delete()
