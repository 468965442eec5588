"""JSON API for experiments and runs (/api/v1)."""
from typing import Any

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_http_methods
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.api import api_view, json_error, validate_body
from orchestrator.experiments.access import get_run_for_user
from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.services import experiment_create, run_request_cancel


class ExperimentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    project: str = Field(default="default", min_length=1, max_length=100)
    config: dict[str, Any] = Field(default_factory=dict)
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    seeds: int = Field(default=1, ge=1, le=100)
    priority: int = 0


@api_view
@require_http_methods(["POST"])
def experiments_create(request: HttpRequest):
    spec, error = validate_body(ExperimentIn, request)
    if error:
        return error
    try:
        experiment = experiment_create(owner=request.user, **spec.model_dump())
    except ConfigError as exc:
        return json_error(400, "invalid run config", [
            {**e, "field": e["field"] if e["field"].startswith(("sweep", "seeds")) else f"config.{e['field']}"}
            for e in exc.errors
        ])
    run_ids = list(experiment.runs.order_by("id").values_list("id", flat=True))
    return JsonResponse({"id": experiment.pk, "runs": run_ids}, status=201)


@api_view
@require_http_methods(["GET"])
def run_detail(request: HttpRequest, run_id: int):
    return JsonResponse(get_run_for_user(request.user, run_id).to_dict())


@api_view
@require_http_methods(["POST"])
def run_cancel(request: HttpRequest, run_id: int):
    from orchestrator.cluster.tasks import cancel_run

    run = get_run_for_user(request.user, run_id, write=True)
    if not run_request_cancel(run=run):
        return json_error(409, f"run {run_id} is {run.state} and cannot be cancelled")
    if run.is_active:
        transaction.on_commit(lambda: cancel_run.delay(run.pk))
    return JsonResponse(run.to_dict())
