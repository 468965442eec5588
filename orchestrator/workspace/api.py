"""JSON API of saved views: /api/v1/projects/<name>/views (list of summaries, create) and
/api/v1/views/<id> (the whole view, update, delete). Authentication and errors as the projects API."""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_http_methods

from orchestrator.accounts.decorators import api_view
from orchestrator.experiments.access import get_project_for_user
from orchestrator.lib.api import json_error, validate_body
from orchestrator.workspace.access import check_can_set_default, check_can_write, get_view_for_user
from orchestrator.workspace.schemas import ViewIn, ViewPatchIn
from orchestrator.workspace.services import ViewNameTaken, ViewRefused, view_create, view_delete, view_update


def _taken(exc: ViewNameTaken) -> JsonResponse:
    return json_error(409, str(exc), [{"field": "name", "message": "already taken in this project"}])


def _refused(exc: ViewRefused) -> JsonResponse:
    return json_error(exc.status, str(exc), [{"field": exc.field, "message": exc.message}])


@api_view
@require_http_methods(["GET", "POST"])
def project_views(request: HttpRequest, name: str):
    project = get_project_for_user(request.user, name)
    if request.method == "GET":
        views = project.saved_views.select_related("owner").order_by("name")
        return JsonResponse({"views": [v.to_summary() for v in views]})
    check_can_write(request.user, project)
    body, error = validate_body(ViewIn, request)
    if error:
        return error
    try:
        if body.default:
            check_can_set_default(request.user, project)
        view = view_create(
            project=project,
            owner=request.user,
            name=body.name,
            page=body.page,
            state=body.state.model_dump(),
            default=body.default,
        )
    except ViewNameTaken as exc:
        return _taken(exc)
    except ViewRefused as exc:
        return _refused(exc)
    return JsonResponse(view.to_dict(), status=201)


@api_view
@require_http_methods(["GET", "PATCH", "DELETE"])
def view_detail(request: HttpRequest, view_id: int):
    if request.method == "GET":
        return JsonResponse(get_view_for_user(request.user, view_id).to_dict())
    try:
        view = get_view_for_user(request.user, view_id, write=True)
    except ViewRefused as exc:
        return _refused(exc)
    if request.method == "DELETE":
        view_delete(view=view)
        return JsonResponse({"deleted": view_id})
    body, error = validate_body(ViewPatchIn, request)
    if error:
        return error
    changes = body.model_dump(include=body.model_fields_set, exclude_none=True)
    if body.state is not None:
        changes["state"] = body.state.model_dump()
    try:
        if changes.get("default", view.is_default) != view.is_default:
            check_can_set_default(request.user, view.project)
        view = view_update(view=view, changes=changes)
    except ViewNameTaken as exc:
        return _taken(exc)
    except ViewRefused as exc:
        return _refused(exc)
    return JsonResponse(view.to_dict())
