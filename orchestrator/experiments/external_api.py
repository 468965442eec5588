"""The JSON endpoints of the `opl` logging SDK: open a run, finish it, and make a logging token.

Opening takes a logging token or a personal token that may write (or the browser session); the
answer carries the run's own token, which is all the SDK writes with afterwards: metrics, samples
and heartbeats go to the ingestion endpoints every trainer uses, and `finish` is here.
"""

from typing import Annotated

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, JsonResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods
from pydantic import BaseModel, ConfigDict, Field

from orchestrator.accounts.decorators import api_view
from orchestrator.accounts.services import TokenError, api_token_lookup, max_days
from orchestrator.experiments.external_runs import (
    ExternalRunError,
    external_run_finish,
    external_run_open,
    logging_token_create,
    logging_token_lookup,
    logging_token_revoke,
    logging_tokens_of,
)
from orchestrator.experiments.models import ExternalRun, LoggingToken, Run
from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.schemas import NAME_PATTERN, Tag
from orchestrator.experiments.tokens import run_not_found, run_token_expired, run_token_expiry, run_token_writes
from orchestrator.lib.api import bearer_token, json_error, method_not_allowed, validate_body
from orchestrator.lib.bounds import MAX_NOTES, MAX_TAGS

Name = Annotated[str, Field(min_length=1, max_length=200, pattern=NAME_PATTERN)]


class ExternalRunIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    client_id: str = Field(
        pattern=r"^[A-Za-z0-9_\-]{8,64}$",
        description="Chosen by the client (8-64 letters, digits, _ or -): the same id opens the same run of yours; "
        "ids are per user, another user's id opens a run of your own.",
    )
    name: Name
    project: Name | None = None
    group: Name | None = Field(default=None, description="The experiment the run joins (runs judged together).")
    config: dict = Field(default_factory=dict)
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    notes: str = Field(default="", max_length=MAX_NOTES)
    heartbeat_timeout_s: int = Field(default=600, ge=30, le=7 * 24 * 3600)


class FinishIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exit_code: int = Field(default=0, ge=-255, le=255)


def _days_cap(schema: dict) -> None:
    """The cap is a setting: the document states today's."""
    for choice in schema.get("anyOf", [schema]):
        if choice.get("type") == "integer":
            choice["maximum"] = max_days()


class LoggingTokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="default", min_length=1, max_length=100)
    days: int | None = Field(
        default=None,
        ge=1,
        description="Lifetime in days, at most OPL_API_TOKEN_MAX_DAYS (the default: that or 365, the lesser); "
        "one made with a personal token ends no later than it",
        json_schema_extra=_days_cap,
    )


@csrf_exempt
@login_not_required
def external_runs(request: HttpRequest):
    """Open (create, or find again by client_id) a run logged from outside."""
    if request.method != "POST":
        return method_not_allowed("POST")
    token = bearer_token(request)
    if token is not None and token.startswith(LoggingToken.PREFIX):
        logging_token = logging_token_lookup(token)
        if logging_token is None:
            return json_error(401, "invalid or expired logging token")
        request.user = logging_token.user
        return _open(request, logging_token)
    return _open_as_user(request)


@api_view
def _open_as_user(request: HttpRequest):
    return _open(request, None)


def _open(request: HttpRequest, logging_token: LoggingToken | None):
    body, error = validate_body(ExternalRunIn, request)
    if error:
        return error
    try:
        opened = external_run_open(user=request.user, logging_token=logging_token, **body.model_dump())
    except ExternalRunError as exc:
        return json_error(exc.status, str(exc), [{"field": exc.field, "message": exc.message}])
    except ConfigError as exc:
        return json_error(400, "invalid request", exc.errors)
    except Http404 as exc:
        return json_error(404, str(exc))
    except PermissionDenied as exc:
        return json_error(403, str(exc))
    run = opened.run
    return JsonResponse(
        {
            "id": run.pk,
            "url": settings.PUBLIC_URL + reverse("exp-run-detail", args=[run.pk]),
            "token": opened.token,
            "attempt": run.attempt,
            "state": run.state,
            "created": opened.created,
        },
        status=201 if opened.created else 200,
    )


@csrf_exempt
@login_not_required
def external_run_finish_view(request: HttpRequest, run_id: int):
    """The end of a run logged from outside, with the run's own token: exit_code 0 succeeded."""
    if request.method != "POST":
        return method_not_allowed("POST")
    token = bearer_token(request)
    if token is None:
        return json_error(401, "missing run token: send Authorization: Bearer <token>")
    run = Run.objects.select_related("owner", "experiment").filter(pk=run_id).first()
    if run is None or not run_token_writes(run, token):
        return json_error(404, run_not_found(run_id))
    if run_token_expired(run):
        return json_error(403, run_token_expiry(run))
    if not ExternalRun.objects.filter(run=run).exists():
        return json_error(409, f"run {run_id} is run by the lab's cluster: its state comes from its job")
    body, error = validate_body(FinishIn, request)
    if error:
        return error
    changed = external_run_finish(run=run, exit_code=body.exit_code)
    run.refresh_from_db(fields=["state", "exit_code"])
    return JsonResponse({"id": run.pk, "state": run.state, "changed": changed})


@api_view
@require_http_methods(["GET", "POST"])
def logging_tokens(request: HttpRequest):
    """GET: the caller's logging tokens (never the tokens themselves). POST: a new one, which opens
    runs and writes only those (shown once); made with a personal token, it ends with that token."""
    if request.method == "GET":
        return JsonResponse({"tokens": [logging_token_to_dict(row) for row in logging_tokens_of(request.user)]})
    body, error = validate_body(LoggingTokenIn, request)
    if error:
        return error
    token = bearer_token(request)
    made_with = api_token_lookup(token) if token else None
    try:
        row, token = logging_token_create(user=request.user, name=body.name, days=body.days, made_with=made_with)
    except TokenError as exc:
        return json_error(400, "invalid request", [{"field": exc.field, "message": exc.message}])
    return JsonResponse({**logging_token_to_dict(row), "token": token}, status=201)


@api_view
@require_http_methods(["DELETE"])
def logging_token_detail(request: HttpRequest, token_id: int):
    """Revoke one of the caller's logging tokens (404, as if none, for anyone else's)."""
    if not logging_token_revoke(user=request.user, token_id=token_id):
        return json_error(404, f"logging token {token_id} does not exist")
    return JsonResponse({"revoked": token_id})


def logging_token_to_dict(row: LoggingToken) -> dict:
    made_with = row.made_with
    return {
        "id": row.pk,
        "name": row.name,
        "created_at": row.created_at.isoformat(),
        "expires_at": row.expires_at.isoformat() if row.expires_at else None,
        "last_used_at": row.last_used_at.isoformat() if row.last_used_at else None,
        "made_with": {"id": made_with.pk, "name": made_with.name} if made_with else None,
    }
