"""Writes of saved views. The one-default-per-project rule is a constraint; setting a new default
clears the old one in the same transaction."""

from django.contrib.auth.models import User
from django.db import transaction

from orchestrator.experiments.models import Project
from orchestrator.workspace.models import SavedView


class ViewNameTaken(ValueError):
    pass


def _clear_default(project: Project, keep: int | None = None) -> None:
    SavedView.objects.filter(project=project, is_default=True).exclude(pk=keep).update(is_default=False)


def _name_free(project: Project, name: str, pk: int | None = None) -> None:
    if SavedView.objects.filter(project=project, name=name).exclude(pk=pk).exists():
        raise ViewNameTaken(f"project {project.name!r} already has a view named {name!r}")


@transaction.atomic
def view_create(*, project: Project, owner: User, name: str, state: dict, page: str = "", default: bool = False):
    _name_free(project, name)
    if default:
        _clear_default(project)
    return SavedView.objects.create(project=project, owner=owner, name=name, state=state, page=page, is_default=default)


@transaction.atomic
def view_update(*, view: SavedView, changes: dict) -> SavedView:
    """`changes`: any of name, page, state, default (as ViewPatchIn gives them)."""
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
