"""JSON API: the enabled launchers, and runs created from one (/api/v1/launchers)."""

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.http import require_http_methods

from orchestrator.accounts.decorators import api_view
from orchestrator.experiments.runconfig import ConfigError
from orchestrator.launchers.schemas import LauncherRunIn
from orchestrator.launchers.selectors import enabled_launchers, launcher_to_dict
from orchestrator.launchers.services import launcher_run_create
from orchestrator.lib.api import json_error, validate_body


@api_view
@require_http_methods(["GET"])
def launchers(request: HttpRequest):
    return JsonResponse({"launchers": [launcher_to_dict(launcher) for launcher in enabled_launchers()]})


@api_view
@require_http_methods(["POST"])
def launcher_runs(request: HttpRequest, name: str):
    spec, error = validate_body(LauncherRunIn, request)
    if error:
        return error
    try:
        run = launcher_run_create(owner=request.user, launcher=name, **spec.model_dump())
    except ConfigError as exc:
        status = 404 if [e["field"] for e in exc.errors] == ["launcher"] else 400
        return json_error(status, "invalid launcher run", exc.errors)
    except Http404 as exc:
        return json_error(404, str(exc), [{"field": "project", "message": str(exc)}])
    except PermissionDenied as exc:
        return json_error(403, str(exc), [{"field": "project", "message": str(exc)}])
    return JsonResponse({"id": run.pk, "experiment": run.experiment_id, "launcher": name}, status=201)
