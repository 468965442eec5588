"""The OpenAPI document of /api/v1, assembled by hand; request bodies come from the pydantic
models the views validate with, and the RunConfig schema from the trainer."""
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from orchestrator.api import api_view
from orchestrator.experiments import schemas
from orchestrator.experiments.sweeps import Distribution, LinearRange, LogRange, RandomSearch
from trainer.config import RunConfig

ERROR = {"$ref": "#/components/responses/Error"}


def _schemas() -> dict[str, Any]:
    models = {
        "ExperimentIn": schemas.ExperimentIn, "PriorityIn": schemas.PriorityIn, "RunAnnotationIn": schemas.RunAnnotationIn,
        "ProjectIn": schemas.ProjectIn, "ProjectPatchIn": schemas.ProjectPatchIn, "LinearRange": LinearRange,
        "LogRange": LogRange, "RandomSearch": RandomSearch, "Distribution": Distribution, "RunConfig": RunConfig,
    }
    out: dict[str, Any] = {}
    for name, model in models.items():
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        out.update(schema.pop("$defs", {}))
        out[name] = schema
    out["ExperimentIn"]["properties"]["sweep"] = schemas.SWEEP_DOC
    out["ExperimentIn"]["properties"]["random"] = {"$ref": "#/components/schemas/RandomSearch"}
    out["Error"] = {"type": "object", "required": ["error"], "properties": {
        "error": {"type": "string"},
        "errors": {"type": "array", "items": {"type": "object", "properties": {
            "field": {"type": "string", "description": "dotted path of the bad value, e.g. config.algorithm.lr"},
            "message": {"type": "string"}}}}}}
    out["Run"] = {"type": "object", "description": "Run.to_dict(): state, backend details, config, tags.", "properties": {
        k: {} for k in ("id", "name", "experiment", "project", "owner", "state", "state_reason", "priority", "gpus",
                        "attempt", "max_attempts", "backend", "job_id", "node_list", "exit_code", "run_dir", "step",
                        "total_steps", "last_heartbeat", "queued_at", "submitted_at", "pending_at", "started_at",
                        "finished_at", "config", "sweep_values", "seed", "notes", "tags")}}
    out["Experiment"] = {"type": "object", "properties": {k: {} for k in (
        "id", "name", "project", "owner", "state", "priority", "sweep", "random", "seeds", "notes", "created_at",
        "runs_by_state", "runs")}}
    ref = {name: {"$ref": f"#/components/schemas/{name}"} for name in ("Run", "Experiment", "Project")}
    out["ExperimentList"] = {"type": "object", "properties": {"experiments": {"type": "array", "items": ref["Experiment"]}}}
    out["RunPage"] = {"type": "object", "properties": {"count": {"type": "integer"}, "page": {"type": "integer"},
                                                       "pages": {"type": "integer"}, "runs": {"type": "array", "items": ref["Run"]}}}
    out["ProjectList"] = {"type": "object", "properties": {"projects": {"type": "array", "items": ref["Project"]}}}
    out["TagList"] = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}}
    out["Preview"] = {"type": "object", "properties": {"count": {"type": "integer"}, "runs": {"type": "array", "items": {
        "type": "object", "properties": {"name": {"type": "string"}, "values": {"type": "object"}, "seed": {"type": "integer"}}}}}}
    out["Project"] = {"type": "object", "properties": {k: {} for k in ("name", "description", "members", "max_active_runs", "max_gpus")}}
    return out


def _body(name: str) -> dict:
    return {"required": True, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}


def _ok(name: str, status: str = "200", description: str = "OK") -> dict:
    return {status: {"description": description, "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}},
            "400": ERROR, "401": ERROR, "403": ERROR, "404": ERROR, "409": ERROR}


def _id(name: str) -> dict:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "integer"}}


def document() -> dict[str, Any]:
    run_id, exp_id = [_id("run_id")], [_id("experiment_id")]
    paths = {
        "/api/v1/experiments": {
            "get": {"summary": "Experiments in your projects (newest 500)", "responses": _ok("ExperimentList")},
            "post": {"summary": "Create an experiment: expand the sweep x seeds into queued runs",
                     "requestBody": _body("ExperimentIn"),
                     "responses": {"201": {"description": "Created", "content": {"application/json": {"schema": {
                         "type": "object", "properties": {"id": {"type": "integer"}, "runs": {"type": "array", "items": {"type": "integer"}}}}}}},
                         "400": ERROR, "401": ERROR}},
        },
        "/api/v1/experiments/preview": {"post": {"summary": "Expand and validate without queuing: count, names, values",
                                                 "requestBody": _body("ExperimentIn"), "responses": _ok("Preview")}},
        "/api/v1/experiments/{experiment_id}": {"get": {"summary": "An experiment with its run ids and counts by state",
                                                        "parameters": exp_id, "responses": _ok("Experiment")}},
        "/api/v1/runs": {"get": {"summary": "Runs, filtered, sorted and paged", "parameters": [
            {"name": "q", "in": "query", "schema": {"type": "string"},
             "description": "Filter, e.g. `algorithm.objective = m2po and staleness.k >= 64`; ops = != > >= < <= ~ in (...)"},
            *({"name": n, "in": "query", "schema": {"type": "string"}} for n in ("state", "user", "project", "tag", "experiment")),
            {"name": "sort", "in": "query", "schema": {"type": "string"}, "description": "id, name, state, priority, step, started, created, user, backend; '-' for descending"},
            {"name": "page", "in": "query", "schema": {"type": "integer"}},
            {"name": "per_page", "in": "query", "schema": {"type": "integer", "maximum": 500}},
        ], "responses": _ok("RunPage")}},
        "/api/v1/runs/{run_id}": {
            "get": {"summary": "A run: state and backend details", "parameters": run_id, "responses": _ok("Run")},
            "patch": {"summary": "Set a run's tags and notes", "parameters": run_id, "requestBody": _body("RunAnnotationIn"), "responses": _ok("Run")},
        },
        "/api/v1/projects": {
            "get": {"summary": "Your projects", "responses": _ok("ProjectList")},
            "post": {"summary": "Create a project (you become a member)", "requestBody": _body("ProjectIn"), "responses": _ok("Project", "201", "Created")},
        },
        "/api/v1/projects/{name}": {
            "get": {"summary": "A project", "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}], "responses": _ok("Project")},
            "patch": {"summary": "Add members; staff also set limits", "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
                      "requestBody": _body("ProjectPatchIn"), "responses": _ok("Project")},
        },
        "/api/v1/tags": {"get": {"summary": "All tag names", "responses": _ok("TagList")}},
        "/api/v1/schema/runconfig": {"get": {"summary": "RunConfig's JSON schema (drives the form)", "responses": _ok("RunConfig")}},
    }
    for action, summary in (("pause", "Pause: submit nothing new"), ("resume", "Resume"),
                            ("cancel", "Cancel the queued and running runs")):
        paths[f"/api/v1/experiments/{{experiment_id}}/{action}"] = {"post": {"summary": summary, "parameters": exp_id, "responses": _ok("Experiment")}}
    paths["/api/v1/experiments/{experiment_id}/priority"] = {"post": {
        "summary": "Set the sweep's priority (and of its queued runs)", "parameters": exp_id,
        "requestBody": _body("PriorityIn"), "responses": _ok("Experiment")}}
    for action, summary in (("cancel", "Cancel: queued at once, active through the cluster"),
                            ("retry", "Put a failed, lost or cancelled run back in the queue"),
                            ("move-to-top", "Make a queued run the owner's next")):
        paths[f"/api/v1/runs/{{run_id}}/{action}"] = {"post": {"summary": summary, "parameters": run_id, "responses": _ok("Run")}}
    paths["/api/v1/runs/{run_id}/priority"] = {"post": {"summary": "Change a queued run's priority", "parameters": run_id,
                                                        "requestBody": _body("PriorityIn"), "responses": _ok("Run")}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "OffPolicy Lab API", "version": "1"},
        "security": [{"bearer": []}, {"session": []}],
        "paths": paths,
        "components": {
            "schemas": _schemas(),
            "responses": {"Error": {"description": "An error; `errors` names each bad field",
                                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "A personal token: manage.py create_api_token USER"},
                "session": {"type": "apiKey", "in": "cookie", "name": "sessionid", "description": "Browser session; send X-CSRFToken on writes"},
            },
        },
    }


@login_not_required  # the document holds no data; clients read it before they have a token
@require_GET
def openapi_json(request):
    return JsonResponse(document())


@api_view
@require_GET
def runconfig_schema(request):
    return JsonResponse(RunConfig.model_json_schema())
