"""The OpenAPI document of /api/v1, every app's routes, assembled by hand: request bodies come from the pydantic models
the views validate with, the RunConfig schema from the trainer, and the answers are typed so that
tests/security/test_schemathesis.py can hold every response to them."""

from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from orchestrator.accounts.decorators import api_view
from orchestrator.alerts.views import ProjectAlertsIn, RuleIn
from orchestrator.experiments import schemas
from orchestrator.experiments.external_api import ExternalRunIn, FinishIn, LoggingTokenIn
from orchestrator.experiments.models import Experiment, Membership, Run
from orchestrator.experiments.sweeps import Distribution, LinearRange, LogRange, RandomSearch
from orchestrator.launchers.schemas import LauncherRunIn
from orchestrator.lib.bounds import INT64
from orchestrator.metrics.models import MAX_KEY_LENGTH
from orchestrator.metrics.schemas import KEY_SCHEMA_PATTERN
from orchestrator.samples.schemas import SampleBatchIn
from orchestrator.workspace.schemas import ViewIn, ViewPatchIn
from trainer.config import RunConfig

ERROR = {"$ref": "#/components/responses/Error"}
ERROR_STATUSES = ("400", "401", "403", "404", "405", "409", "413")
STEP_MAX = 2**53 - 1  # orchestrator.metrics.schemas.MAX_STEP
SLUG = r"^[-a-zA-Z0-9_]+$"  # Django's <slug:> path converter


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def _object(properties: dict, required: list[str] | None = None, **extra) -> dict:
    return {"type": "object", "properties": properties, "required": required or list(properties), **extra}


INT, STR, NUM, OBJ = {"type": "integer"}, {"type": "string"}, {"type": "number"}, {"type": "object"}
TIME = _nullable({"type": "string", "format": "date-time"})


def _response_schemas() -> dict[str, Any]:
    run = _object(
        {
            "id": INT,
            "name": STR,
            "experiment": INT,
            "project": STR,
            "owner": _nullable(STR),
            "state": {"type": "string", "enum": Run.State.values},
            "state_reason": STR,
            "priority": INT,
            "gpus": INT,
            "attempt": INT,
            "max_attempts": INT,
            "backend": STR,
            "job_id": STR,
            "node_list": STR,
            "exit_code": _nullable(INT),
            "run_dir": STR,
            "step": {
                **INT,
                "description": "Optimizer updates done (the trainer's heartbeat); a training step is "
                "updates_per_step x epochs updates",
            },
            "total_steps": {
                **_nullable(INT),
                "description": "The run's total optimizer updates: train.steps x updates_per_step x epochs",
            },
            "last_heartbeat": TIME,
            "queued_at": TIME,
            "submitted_at": TIME,
            "pending_at": TIME,
            "started_at": TIME,
            "finished_at": TIME,
            "config": OBJ,
            "sweep_values": OBJ,
            "seed": INT,
            "parent": _nullable(INT),
            "parent_step": _nullable(INT),
            "notes": STR,
            "tags": {"type": "array", "items": STR},
            "summary": {
                "type": "object",
                "additionalProperties": _ref("MetricSummary"),
                "description": "Per metric key (GET answers only).",
            },
        },
        required=[
            "id",
            "name",
            "experiment",
            "project",
            "owner",
            "state",
            "state_reason",
            "priority",
            "gpus",
            "attempt",
            "max_attempts",
            "backend",
            "job_id",
            "node_list",
            "exit_code",
            "run_dir",
            "step",
            "total_steps",
            "last_heartbeat",
            "queued_at",
            "submitted_at",
            "pending_at",
            "started_at",
            "finished_at",
            "config",
            "sweep_values",
            "seed",
            "parent",
            "parent_step",
            "notes",
            "tags",
        ],
        description="A run: state, backend details, config, tags, its own notes and its metric summaries.",
    )
    experiment_fields = {
        "id": INT,
        "name": STR,
        "project": STR,
        "owner": STR,
        "state": {
            "type": "string",
            "enum": Experiment.State.values,
            "description": "ended: all its runs have ended (a retried run reopens it)",
        },
        "priority": INT,
        "sweep": OBJ,
        "random": OBJ,
        "seeds": INT,
        "notes": STR,
        "created_at": {"type": "string", "format": "date-time"},
    }
    experiment = _object(
        {
            **experiment_fields,
            "runs_by_state": {"type": "object", "additionalProperties": INT},
            "runs": {"type": "array", "items": INT},
        },
        required=list(experiment_fields),
    )
    project = _object(
        {
            "name": STR,
            "description": STR,
            "members": {"type": "array", "items": STR},
            "roles": {"type": "object", "additionalProperties": {"type": "string", "enum": Membership.Role.values}},
            "invited": {
                "type": "object",
                "additionalProperties": {"type": "string", "enum": Membership.Role.values},
                "description": "Users invited, with the role offered: they join by accepting",
            },
            "personal": {"type": "boolean"},
            "max_active_runs": _nullable(INT),
            "max_gpus": _nullable(INT),
        }
    )
    point_value = {"anyOf": [NUM, {"type": "string", "enum": ["NaN", "Infinity", "-Infinity"]}]}
    wire_point = {
        "type": "array",
        "items": {"anyOf": [INT, point_value]},
        "minItems": 2,
        "maxItems": 2,
        "description": "[step, value]",
    }
    attempts = {
        "type": "array",
        "items": {"type": "array", "items": INT, "minItems": 2, "maxItems": 2},
        "description": "[attempt, first step] of each attempt after a restart",
    }
    compare_runs = {
        "type": "array",
        "items": _object({"run": INT, "points": {"type": "array", "items": wire_point}, "attempts": attempts}),
    }
    summary = _object(
        {
            "last": point_value,
            "min": _nullable(NUM),
            "max": _nullable(NUM),
            "tail_mean": {
                **_nullable(NUM),
                "description": "Mean of the finite values over the last 10% of the key's steps",
            },
            "count": INT,
            "last_step": INT,
            "value": {
                "description": "The run's own summary value of the key (set by the trainer, or the aggregate "
                "its metric definition names); a key set but never logged has this field alone"
            },
        },
        description="A metric key's summary over the run's live points (min/max over finite values). Every "
        "logged key has last, min, max, tail_mean, count and last_step.",
    )
    summary["required"] = []  # a key the run set in its summary but never logged has "value" alone
    return {
        "MetricSummary": summary,
        "Run": run,
        "Experiment": experiment,
        "Project": project,
        "ExperimentList": _object({"experiments": {"type": "array", "items": _ref("Experiment")}}),
        "RunPage": _object({"count": INT, "page": INT, "pages": INT, "runs": {"type": "array", "items": _ref("Run")}}),
        "ProjectList": _object(
            {
                "projects": {"type": "array", "items": _ref("Project")},
                "invitations": {"type": "array", "items": _ref("Invitation")},
            }
        ),
        "Invitation": _object(
            {
                "project": STR,
                "role": {"type": "string", "enum": Membership.Role.values},
                "invited_by": _nullable(STR),
                "created_at": STR,
            }
        ),
        "InvitationDeclined": _object({"declined": STR}),
        "TagList": _object({"tags": {"type": "array", "items": STR}}),
        "Created": _object({"id": INT, "runs": {"type": "array", "items": INT}}),
        "Preview": _object(
            {"count": INT, "runs": {"type": "array", "items": _object({"name": STR, "values": OBJ, "seed": INT})}}
        ),
        "JsonSchema": {
            "type": "object",
            "description": "A JSON Schema document (here: RunConfig's, which drives the form).",
        },
        "MetricPoint": _object(
            {
                "step": {"type": "integer", "minimum": 0, "maximum": STEP_MAX},
                "key": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_KEY_LENGTH,
                    "pattern": KEY_SCHEMA_PATTERN,
                    "description": "any printable text, stored exactly; control and bidi characters are refused",
                },
                "value": point_value,
                "time": NUM,
            },
            additionalProperties=False,
        ),
        "MetricBatch": _object(
            {
                "attempt": _nullable(INT),
                "points": {
                    "type": "array",
                    "items": {"description": "a MetricPoint; a point that is not one is refused alone"},
                    "maxItems": 200_000,
                },
            },
            required=["points"],
            description="Sent by a run's trainer with the run's token.",
        ),
        "Stored": _object({"stored": INT}),
        "MetricsStored": _object(
            {
                "stored": {**INT, "description": "points stored"},
                "refused": {
                    "type": "array",
                    "description": "each refused point (at most 1000 listed); the rest of the batch was stored",
                    "items": _object(
                        {
                            "index": INT,
                            "key": _nullable(STR),
                            "step": _nullable(NUM),
                            "field": STR,
                            "reason": STR,
                        }
                    ),
                },
                "refused_keys": {"type": "object", "additionalProperties": INT, "description": "refusals per key"},
                "refused_total": {**INT, "description": "present when more points were refused than listed"},
            },
            required=["stored", "refused", "refused_keys"],
        ),
        "SamplesStored": _object(
            {
                "stored": {**INT, "description": "samples written (new, or replacing an older attempt's)"},
                "duplicates": {**INT, "description": "samples this attempt had already stored: nothing changed"},
                "dropped": {**INT, "description": "samples the per-run bound thinned in this call"},
            }
        ),
        "RunSamples": _object(
            {
                "run": INT,
                "kind": {"type": "string", "enum": ["train", "eval"]},
                "steps": {
                    "type": "array",
                    "items": _object({"step": INT, "n": INT, "masked": INT, "clipped": INT}),
                    "description": "recorded steps, newest first: samples, masked and clipped tokens in each",
                },
                "step": {**_nullable(INT), "description": "the step shown (the newest unless asked)"},
                "samples": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "description": "the spool's fields (docs/SAMPLES.md), "
                        "log ratios unpacked, with prompt_hash, attempt, n_masked, n_clipped",
                    },
                },
            }
        ),
        "Heartbeat": _object(
            {
                "attempt": _nullable(INT),
                "step": _nullable({"type": "integer", "minimum": 0, "maximum": STEP_MAX}),
                "total_steps": _nullable({"type": "integer", "minimum": 0, "maximum": STEP_MAX}),
            },
            required=[],
        ),
        "Ok": _object({"ok": {"type": "boolean"}}),
        "RunUpdate": _object(
            {
                "kind": {
                    "type": "string",
                    "enum": ["config", "summary", "define_metric", "alert", "histogram", "table"],
                },
            },
            description="config: {config}; summary: {summary}; define_metric: {name, step_metric, summary: "
            "max|min|last|mean}; alert: {title, text, level: info|warn|error}; histogram: {key, step, bins (edges), "
            "counts}; table: {key, step, columns, rows}",
        ),
        "UpdateDone": _object(
            {"ok": {"type": "boolean"}, "alert": INT, "samples": INT},
            required=["ok"],
        ),
        "LoggedObjects": {
            **_object(
                {
                    "key": STR,
                    "keys": {"type": "array", "items": STR},
                    "histograms": {"type": "array", "items": OBJ},
                    "tables": {"type": "array", "items": OBJ},
                }
            ),
            "required": [],
        },
        "MetricKeys": _object({"keys": {"type": "array", "items": STR}}),
        "Series": _object(
            {
                "series": {
                    "type": "array",
                    "description": "One entry per key asked, in the order asked",
                    "items": _object({"key": STR, "points": {"type": "array", "items": wire_point}}),
                },
                "key": {**STR, "description": "Only when one key was asked: that key (as before several keys)"},
                "points": {
                    "type": "array",
                    "items": wire_point,
                    "description": "Only when one key was asked: its points",
                },
                "seq": {
                    **INT,
                    "description": "The live stream position this answer reflects: open the stream with after=seq",
                },
                "attempts": attempts,
            },
            required=["series", "seq", "attempts"],
            description="Points are [step, value]; step is the optimizer update count (a training step is "
            "updates_per_step x epochs updates).",
        ),
        "CompareSeries": _object(
            {
                "series": {
                    "type": "array",
                    "description": "One entry per key asked, in the order asked",
                    "items": _object({"key": STR, "runs": compare_runs}, required=["key", "runs"]),
                },
                "key": {**STR, "description": "Only when one key was asked: that key (as before several keys)"},
                "runs": {**compare_runs, "description": "Only when one key was asked: its runs"},
            },
            required=["series"],
        ),
    }


def _schemas() -> dict[str, Any]:
    models = {
        "ExperimentIn": schemas.ExperimentIn,
        "PriorityIn": schemas.PriorityIn,
        "RunAnnotationIn": schemas.RunAnnotationIn,
        "ProjectIn": schemas.ProjectIn,
        "ProjectPatchIn": schemas.ProjectPatchIn,
        "LinearRange": LinearRange,
        "LogRange": LogRange,
        "RandomSearch": RandomSearch,
        "Distribution": Distribution,
        "RunConfig": RunConfig,
    }

    models.update({"AlertRuleIn": RuleIn, "ProjectAlertsIn": ProjectAlertsIn, "SampleBatch": SampleBatchIn})
    models.update({"ExternalRunIn": ExternalRunIn, "FinishIn": FinishIn, "LoggingTokenIn": LoggingTokenIn})
    models.update({"LauncherRunIn": LauncherRunIn, "ViewIn": ViewIn, "ViewPatchIn": ViewPatchIn})
    out: dict[str, Any] = {}
    for name, model in models.items():
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        out.update(schema.pop("$defs", {}))
        out[name] = schema
    out["ExperimentIn"]["properties"]["sweep"] = schemas.SWEEP_DOC
    out["ExperimentIn"]["properties"]["random"] = _ref("RandomSearch")
    out["Error"] = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {"type": "string"},
            "errors": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "field": {
                            "type": "string",
                            "description": "dotted path of the bad value, e.g. config.algorithm.lr",
                        },
                        "message": {"type": "string"},
                    },
                },
            },
        },
    }
    out.update(_response_schemas())
    rules = {"type": "array", "items": {"type": "object"}}
    out["RunAlerts"] = {
        "type": "object",
        "required": ["run", "alerts", "rules"],
        "properties": {
            "run": {"type": "integer"},
            "alerts": {"type": "array", "items": {"type": "object"}},
            "rules": rules,
        },
    }
    out.update(_sdk_launcher_view_schemas())
    out["ProjectAlerts"] = {
        "type": "object",
        "required": ["project", "rules", "notifications"],
        "properties": {"project": {"type": "string"}, "rules": rules, "notifications": {"type": "object"}},
    }
    return out


def _sdk_launcher_view_schemas() -> dict[str, Any]:
    """Answers of the logging SDK, launcher, saved-view and sweep-glance endpoints."""
    logging_token = {
        "id": INT,
        "name": STR,
        "created_at": STR,
        "expires_at": _nullable(STR),
        "last_used_at": _nullable(STR),
        "made_with": _nullable(_object({"id": INT, "name": STR})),
    }
    view = _object(
        {
            "id": INT,
            "project": STR,
            "name": STR,
            "owner": _nullable(STR),
            "page": STR,
            "default": {"type": "boolean"},
            "state": OBJ,
            "updated_at": TIME,
        }
    )
    return {
        "ExternalRunOpened": _object(
            {
                "id": INT,
                "url": STR,
                "token": {**STR, "description": "The run's own ingestion token: all the SDK writes with"},
                "attempt": INT,
                "state": {"type": "string", "enum": Run.State.values},
                "created": {"type": "boolean", "description": "false: the client_id found the run again"},
            }
        ),
        "ExternalRunFinished": _object(
            {"id": INT, "state": {"type": "string", "enum": Run.State.values}, "changed": {"type": "boolean"}}
        ),
        "LoggingToken": _object({**logging_token, "token": {**STR, "description": "Shown once"}}),
        "LoggingTokenList": _object({"tokens": {"type": "array", "items": _object(logging_token)}}),
        "LoggingTokenRevoked": _object({"revoked": INT}),
        "LauncherList": _object({"launchers": {"type": "array", "items": OBJ}}),
        "LauncherRunCreated": _object({"id": INT, "experiment": INT, "launcher": STR}),
        "View": view,
        "ViewList": _object(
            {
                "views": {
                    "type": "array",
                    "description": "Summaries: GET /api/v1/views/{view_id} gives one view with its state",
                    "items": _object(
                        {
                            "id": INT,
                            "name": STR,
                            "owner": _nullable(STR),
                            "page": STR,
                            "default": {"type": "boolean"},
                            "panels": INT,
                            "updated_at": TIME,
                        }
                    ),
                }
            }
        ),
        "ViewDeleted": _object({"deleted": INT}),
        "Glance": _object(
            {
                "key": STR,
                "stat": STR,
                "stats": OBJ,
                "keys": {"type": "array", "items": STR},
                "axes": {"type": "array"},
                "runs": {"type": "array", "items": OBJ},
            }
        ),
    }


def _sdk_launcher_view_paths(run_id: list, name: list) -> dict[str, Any]:
    view_id = [_id("view_id")]
    launcher = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string", "pattern": SLUG}}]
    return {
        "/api/v1/sdk/runs": {
            "post": {
                "summary": "Open a run logged from outside the lab's cluster (the opl SDK), or find it again by "
                "client_id; with a logging token or a personal token that may write",
                "requestBody": _body("ExternalRunIn"),
                "responses": {**_ok("ExternalRunOpened"), **_ok("ExternalRunOpened", "201", "Created")},
            }
        },
        "/api/v1/sdk/runs/{run_id}/finish": {
            "post": {
                "summary": "End an SDK run (its own token only): exit_code 0 succeeded, else failed; 409 for a run "
                "the cluster runs",
                "parameters": run_id,
                "security": RUN_TOKEN,
                "requestBody": _body("FinishIn"),
                "responses": _ok("ExternalRunFinished"),
            }
        },
        "/api/v1/sdk/tokens": {
            "get": {
                "summary": "Your logging tokens (never the tokens themselves)",
                "responses": _ok("LoggingTokenList"),
            },
            "post": {
                "summary": "A new logging token of yours: it opens runs and writes only those (shown once); made "
                "with a personal token, it ends with that token",
                "requestBody": _body("LoggingTokenIn"),
                "responses": _ok("LoggingToken", "201", "Created"),
            },
        },
        "/api/v1/sdk/tokens/{token_id}": {
            "delete": {
                "summary": "Revoke one of your logging tokens",
                "parameters": [_id("token_id")],
                "responses": _ok("LoggingTokenRevoked"),
            }
        },
        "/api/v1/launchers": {
            "get": {"summary": "The launchers the lab enabled, with their parameters", "responses": _ok("LauncherList")}
        },
        "/api/v1/launchers/{name}/runs": {
            "post": {
                "summary": "Queue a run of a launcher; a bad parameter is a 400 naming it",
                "parameters": launcher,
                "requestBody": _body("LauncherRunIn"),
                "responses": _ok("LauncherRunCreated", "201", "Created"),
            }
        },
        "/api/v1/projects/{name}/views": {
            "get": {"summary": "The project's saved views", "parameters": name, "responses": _ok("ViewList")},
            "post": {
                "summary": "Save a view in the project (members who may write)",
                "parameters": name,
                "requestBody": _body("ViewIn"),
                "responses": _ok("View", "201", "Created"),
            },
        },
        "/api/v1/views/{view_id}": {
            "get": {"summary": "A saved view", "parameters": view_id, "responses": _ok("View")},
            "patch": {
                "summary": "Rename, move or change a saved view",
                "parameters": view_id,
                "requestBody": _body("ViewPatchIn"),
                "responses": _ok("View"),
            },
            "delete": {"summary": "Delete a saved view", "parameters": view_id, "responses": _ok("ViewDeleted")},
        },
        "/api/v1/metrics/glance": {
            "get": {
                "summary": "A sweep at a glance: each run's axes and one summary of one key",
                "parameters": [
                    _query("experiment", {"type": "integer", "minimum": 1}, "an experiment's runs"),
                    _query("runs", {"type": "string"}, "or comma-separated run ids (at most 200)"),
                    _query("key", {"type": "string"}, "the metric key; default the reward or the first key"),
                    _query("stat", {"type": "string", "enum": ["tail_mean", "last", "min", "max"]}),
                ],
                "responses": _ok("Glance"),
            }
        },
    }


NO_NUL = r"^[^\x00]*$"  # PostgreSQL's text holds no NUL: every input string refuses it


def _refuse_nul_in_inputs(paths: dict, components: dict) -> None:
    """Say in the document what the server does: a NUL in any string a request sends (a query or
    path parameter, a body field) is refused. Strings with a pattern or a fixed set keep theirs."""
    seen: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[1]
            if name not in seen and name in components:
                seen.add(name)
                walk(components[name])
            return
        if node.get("type") == "string" and not {"pattern", "enum", "const", "format"} & node.keys():
            node["pattern"] = NO_NUL
        for key, value in node.items():
            if key not in ("examples", "example", "default", "const", "enum"):
                walk(value)

    for operations in paths.values():
        for operation in operations.values():
            walk(operation.get("parameters", []))
            walk(operation.get("requestBody", {}))


def _body(name: str) -> dict:
    return {"required": True, "content": {"application/json": {"schema": _ref(name)}}}


def _ok(name: str, status: str = "200", description: str = "OK") -> dict:
    return {
        status: {"description": description, "content": {"application/json": {"schema": _ref(name)}}},
        **dict.fromkeys(ERROR_STATUSES, ERROR),
    }


def _id(name: str) -> dict:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "integer", "minimum": 1, "maximum": INT64[1]},
    }


def _query(name: str, schema: dict, description: str = "", required: bool = False) -> dict:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "schema": schema,
        **({"description": description} if description else {}),
    }


WINDOW = [
    _query("start", {"type": "integer", "minimum": 0, "maximum": STEP_MAX}, "first step"),
    _query("end", {"type": "integer", "minimum": 0, "maximum": STEP_MAX}, "last step (>= start)"),
    _query("max_points", {"type": "integer", "minimum": 2, "maximum": 20_000}, "points per run at most (min/max kept)"),
    _query("field", {"type": "string", "enum": ["value", "time"]}),
]
KEYS = {
    "name": "key",
    "in": "query",
    "required": True,
    "style": "form",
    "explode": True,
    "schema": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": 50},
    "description": "metric keys: key=a&key=b, or comma-separated key=a,b (at most 50). A key the run does not "
    "have answers 404 naming the keys it has.",
}
RUN_TOKEN = [{"runToken": []}]
SSE_EVENT = {  # one event of the stream; `data` is JSON: {seq, type, attempt, points: {key: [[step, value]...]}}
    "type": "object",
    "required": ["event", "id", "data"],
    "properties": {
        "event": {"type": "string", "enum": ["points", "reset"]},
        "id": {"type": "string", "pattern": "^[0-9]+$"},
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
}


def document() -> dict[str, Any]:
    run_id, exp_id = [_id("run_id")], [_id("experiment_id")]
    name = [
        {"name": "name", "in": "path", "required": True, "schema": {"type": "string", "pattern": schemas.NAME_PATTERN}}
    ]
    paths = {
        "/api/v1/experiments": {
            "get": {"summary": "Experiments in your projects (newest 500)", "responses": _ok("ExperimentList")},
            "post": {
                "summary": "Create an experiment: expand the sweep x seeds into queued runs. Names an existing "
                "project you may add to, a new one (created, you its owner) or none (your own).",
                "requestBody": _body("ExperimentIn"),
                "responses": _ok("Created", "201", "Created"),
            },
        },
        "/api/v1/experiments/preview": {
            "post": {
                "summary": "Expand and validate without queuing: count, names, values",
                "requestBody": _body("ExperimentIn"),
                "responses": _ok("Preview"),
            }
        },
        "/api/v1/experiments/{experiment_id}": {
            "get": {
                "summary": "An experiment with its run ids and counts by state",
                "parameters": exp_id,
                "responses": _ok("Experiment"),
            }
        },
        "/api/v1/runs": {
            "get": {
                "summary": "Runs, filtered, sorted and paged",
                "parameters": [
                    _query(
                        "q",
                        {"type": "string", "maxLength": 2000},
                        "Filter, e.g. `algorithm.objective = m2po and staleness.k >= 64`; "
                        "ops = != > >= < <= ~ in (...); at most 20 clauses and 100 values in one `in`",
                    ),
                    _query("state", {"type": "string", "enum": Run.State.values}),
                    *(_query(n, {"type": "string"}) for n in ("user", "project", "tag")),
                    _query("experiment", {"type": "integer", "minimum": 1}),
                    _query(
                        "sort",
                        {"type": "string"},
                        "id, name, state, priority, step, started, created, user, backend, or metric:<key> "
                        "(by its summary named in `stat`, runs without the key last); '-' for descending",
                    ),
                    _query(
                        "stat",
                        {"type": "string", "enum": ["last", "tail_mean", "min", "max"]},
                        "the summary a metric:<key> sort uses (default last)",
                    ),
                    _query("page", {"type": "integer", "minimum": 1}),
                    _query(
                        "per_page", {"type": "integer", "minimum": 1, "maximum": 500}, "a value outside 1..500 is a 400"
                    ),
                    _query(
                        "summary_keys",
                        {"type": "string"},
                        "Comma-separated metric keys each run's summary is limited to",
                    ),
                ],
                "responses": _ok("RunPage"),
            }
        },
        "/api/v1/runs/{run_id}": {
            "get": {"summary": "A run: state and backend details", "parameters": run_id, "responses": _ok("Run")},
            "patch": {
                "summary": "Set a run's tags and notes",
                "parameters": run_id,
                "requestBody": _body("RunAnnotationIn"),
                "responses": _ok("Run"),
            },
        },
        "/api/v1/projects": {
            "get": {"summary": "Your projects", "responses": _ok("ProjectList")},
            "post": {
                "summary": "Create a project (you become its owner)",
                "requestBody": _body("ProjectIn"),
                "responses": _ok("Project", "201", "Created"),
            },
        },
        "/api/v1/projects/{name}": {
            "get": {"summary": "A project you are a member of", "parameters": name, "responses": _ok("Project")},
            "patch": {
                "summary": "Owners invite members (who join by accepting), remove them, set roles; staff set limits",
                "parameters": name,
                "requestBody": _body("ProjectPatchIn"),
                "responses": _ok("Project"),
            },
        },
        "/api/v1/projects/{name}/invitation": {
            "get": {"summary": "Your invitation to a project", "parameters": name, "responses": _ok("Invitation")},
            "post": {
                "summary": "Accept your invitation: join the project with the role offered",
                "parameters": name,
                "responses": _ok("Project"),
            },
            "delete": {
                "summary": "Decline your invitation",
                "parameters": name,
                "responses": _ok("InvitationDeclined"),
            },
        },
        "/api/v1/tags": {"get": {"summary": "Tag names on the runs you can see", "responses": _ok("TagList")}},
        "/api/v1/schema/runconfig": {
            "get": {"summary": "RunConfig's JSON schema (drives the form)", "responses": _ok("JsonSchema")}
        },
        "/api/v1/runs/{run_id}/metrics": {
            "get": {
                "summary": "One or several metrics of a run, each downsampled to max_points over [start, end] "
                "(steps are optimizer updates); 404 names the run's keys when one is unknown",
                "parameters": [*run_id, KEYS, *WINDOW],
                "responses": _ok("Series"),
            },
            "post": {
                "summary": "Ingest a batch of points (the run's own token only, checked before the body is read); "
                "every storable point is stored and each bad one is refused alone, with its key, step and "
                "reason; only a wrong envelope (not JSON, points not a list) is refused whole. The body "
                "may be gzip-compressed (Content-Encoding: gzip). 413 names the limit a body broke: "
                "OPL_INGEST_MAX_BODY_BYTES as sent (2.5 MiB), "
                "OPL_INGEST_MAX_INFLATED_BYTES (64 MiB) or OPL_INGEST_MAX_INFLATE_RATIO (100x) inflated; "
                "send less per request. 429 with Retry-After: the run's queue is deep, nothing was "
                "stored, send it again after that many seconds.",
                "parameters": [
                    *run_id,
                    {
                        "name": "Content-Encoding",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "enum": ["gzip", "identity"]},
                    },
                ],
                "security": RUN_TOKEN,
                "requestBody": _body("MetricBatch"),
                "responses": {**_ok("MetricsStored", "202", "Accepted"), "415": ERROR, "429": ERROR},
            },
        },
        "/api/v1/runs/{run_id}/samples": {
            "get": {
                "summary": "A run's rollout samples at one recorded step (the newest unless `step`): tokens, "
                "log ratios, the objective's masked and clipped token indices, reward and verdict",
                "parameters": [
                    *run_id,
                    _query("kind", {"type": "string", "enum": ["train", "eval"]}),
                    _query(
                        "step", {"type": "integer", "minimum": 0, "maximum": STEP_MAX}, "a recorded step (else 400)"
                    ),
                    _query("verdict", {"type": "string", "enum": ["all", "right", "wrong"]}),
                    _query("sort", {"type": "string", "enum": ["index", "ratio", "masked", "clipped", "reward"]}),
                ],
                "responses": _ok("RunSamples"),
            },
            "post": {
                "summary": "Ingest rollout samples (the run's own token only), idempotent on (kind, step, index); a "
                "later attempt replaces. Refused whole if any sample is bad; text over 8,000 characters "
                "and tokens over 4,096 are cut. Over the per-run bound older steps are thinned (dropped). "
                "gzip, 413 and 429 + Retry-After as for metrics; at most OPL_SAMPLES_MAX_PER_BATCH (512) samples.",
                "parameters": [
                    *run_id,
                    {
                        "name": "Content-Encoding",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "enum": ["gzip", "identity"]},
                    },
                ],
                "security": RUN_TOKEN,
                "requestBody": _body("SampleBatch"),
                "responses": {**_ok("SamplesStored"), "415": ERROR, "429": ERROR},
            },
        },
        "/api/v1/runs/{run_id}/metrics/keys": {
            "get": {"summary": "The metric keys a run has", "parameters": run_id, "responses": _ok("MetricKeys")}
        },
        "/api/v1/runs/{run_id}/metrics/stream": {
            "get": {
                "summary": "Server-Sent Events of the run's new points (resume with Last-Event-ID or after)",
                "parameters": [
                    *run_id,
                    _query("after", {"type": "integer", "minimum": 0}),
                    _query("keys", {"type": "string"}, "comma-separated"),
                ],
                "responses": {
                    "200": {"description": "An event stream", "content": {"text/event-stream": {"schema": SSE_EVENT}}},
                    **dict.fromkeys(ERROR_STATUSES, ERROR),
                },
            }
        },
        "/api/v1/runs/{run_id}/heartbeat": {
            "post": {
                "summary": "The trainer's heartbeat: step and total steps (the run's own token only)",
                "parameters": run_id,
                "security": RUN_TOKEN,
                "requestBody": _body("Heartbeat"),
                "responses": _ok("Ok"),
            }
        },
        "/api/v1/runs/{run_id}/updates": {
            "post": {
                "summary": "What a run reports besides points (the run's own token only): kind config (merged into "
                "the config of a run logged from outside), summary, define_metric, alert, histogram or table; a "
                "table with prompt and response columns is also stored as samples",
                "parameters": run_id,
                "security": RUN_TOKEN,
                "requestBody": _body("RunUpdate"),
                "responses": {**_ok("UpdateDone"), "409": ERROR},
            }
        },
        "/api/v1/runs/{run_id}/histograms": {
            "get": {
                "summary": "A run's histograms of one key, in step order (the newest 500); without key, the keys",
                "parameters": [*run_id, _query("key", STR, "the histogram's key")],
                "responses": _ok("LoggedObjects"),
            }
        },
        "/api/v1/runs/{run_id}/tables": {
            "get": {
                "summary": "A run's tables of one key, in step order (the newest 500); without key, the keys",
                "parameters": [*run_id, _query("key", STR, "the table's key")],
                "responses": _ok("LoggedObjects"),
            }
        },
        "/api/v1/metrics/compare": {
            "get": {
                "summary": "Metrics of many runs, each key on one bucket grid (at most 200 runs x keys per call; a "
                "key none of the runs has is a 404 naming their keys)",
                "parameters": [
                    _query("runs", {"type": "string"}, "comma-separated run ids (at most 200)", required=True),
                    {
                        **KEYS,
                        "description": "metric keys: key=a&key=b, or comma-separated key=a,b (at most 50, and "
                        "runs x keys at most 200). A key that none of the runs has answers 404 naming their keys.",
                    },
                    *WINDOW,
                ],
                "responses": _ok("CompareSeries"),
            }
        },
    }
    for action, summary in (
        ("pause", "Pause: submit nothing new"),
        ("resume", "Resume"),
        ("cancel", "Cancel the queued and running runs"),
    ):
        paths[f"/api/v1/experiments/{{experiment_id}}/{action}"] = {
            "post": {"summary": summary, "parameters": exp_id, "responses": _ok("Experiment")}
        }
    paths["/api/v1/experiments/{experiment_id}/priority"] = {
        "post": {
            "summary": "Set the sweep's priority (and of its queued runs)",
            "parameters": exp_id,
            "requestBody": _body("PriorityIn"),
            "responses": _ok("Experiment"),
        }
    }
    for action, summary in (
        ("cancel", "Cancel: queued at once, active through the cluster"),
        ("retry", "Put a failed, lost or cancelled run back in the queue"),
        ("move-to-top", "Make a queued run the owner's next"),
    ):
        paths[f"/api/v1/runs/{{run_id}}/{action}"] = {
            "post": {"summary": summary, "parameters": run_id, "responses": _ok("Run")}
        }
    paths["/api/v1/runs/{run_id}/priority"] = {
        "post": {
            "summary": "Change a queued run's priority",
            "parameters": run_id,
            "requestBody": _body("PriorityIn"),
            "responses": _ok("Run"),
        }
    }
    paths["/api/v1/runs/{run_id}/alerts"] = {
        "get": {
            "summary": "The run's fired alerts and its effective rules",
            "parameters": run_id,
            "responses": _ok("RunAlerts"),
        },
        "post": {
            "summary": "Set one of the run's own alert rules",
            "parameters": run_id,
            "requestBody": _body("AlertRuleIn"),
            "responses": _ok("RunAlerts"),
        },
    }
    paths["/api/v1/projects/{name}/alerts"] = {
        "get": {
            "summary": "The project's alert rules and where its alerts go",
            "parameters": name,
            "responses": _ok("ProjectAlerts"),
        },
        "post": {
            "summary": "Set a project alert rule and/or its notifications (owners)",
            "parameters": name,
            "requestBody": _body("ProjectAlertsIn"),
            "responses": _ok("ProjectAlerts"),
        },
    }
    paths.update(_sdk_launcher_view_paths(run_id, name))
    components = _schemas()
    _refuse_nul_in_inputs(paths, components)
    return {
        "openapi": "3.1.0",
        "info": {"title": "OffPolicy Lab API", "version": "1"},
        "security": [{"bearer": []}, {"session": []}],
        "paths": paths,
        "components": {
            "schemas": components,
            "responses": {
                "Error": {
                    "description": "An error; `errors` names each bad field",
                    "content": {"application/json": {"schema": _ref("Error")}},
                }
            },
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A personal token (the API tokens page, or manage.py create_api_token USER "
                    "[--days N] [--read-only]). It expires (401 after that); a read-only token "
                    "may only GET (403 on any other method).",
                },
                "session": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "sessionid",
                    "description": "Browser session; send X-CSRFToken on writes",
                },
                "runToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": (
                        "A run's ingestion token (OPL_RUN_TOKEN in its job); refused 24 h after the run ended"
                    ),
                },
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
