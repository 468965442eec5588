"""The JSON API's answers: errors in one shape, strict bodies, refused NUL characters and sizes.
Authentication is accounts' api_view (orchestrator/accounts/decorators.py)."""

import json
from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, ValidationError

from orchestrator.lib.bounds import MAX_DEPTH, json_problem, text_problem


def json_error(status: int, message: str, errors: list[dict[str, Any]] | None = None) -> JsonResponse:
    body: dict[str, Any] = {"error": message}
    if errors:
        body["errors"] = errors
    return JsonResponse(body, status=status)


def bearer_token(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def nul_in_url(request: HttpRequest) -> JsonResponse | None:
    """No PostgreSQL text holds a NUL: refuse it in the path or a query parameter up front."""
    if "\x00" in request.path:
        return json_error(404, "no such path: it contains a NUL character")
    if problem := text_problem(request.GET):
        return json_error(400, "invalid query", [{"field": problem[0], "message": problem[1]}])
    return None


def body_too_large(limit: int, setting: str, size: int | None = None) -> JsonResponse:
    """The 413 of a request body over `limit` bytes, naming the limit and the setting that sets it."""
    got = f"{size:,} bytes" if size is not None else "over the limit"
    return json_error(
        413,
        f"request body is {got}; the limit is {limit:,} bytes ({setting}): send less per request",
        [{"field": "(body)", "message": f"at most {limit} bytes"}],
    )


def method_not_allowed(allow: str) -> JsonResponse:
    response = json_error(405, f"method not allowed; use {allow}")
    response["Allow"] = allow
    return response


@csrf_exempt
@login_not_required
def not_found(request: HttpRequest, path: str = "") -> JsonResponse:
    """Every /api/ path no pattern matches (a non-integer id, a typo) answers JSON, not a page."""
    return json_error(404, f"no API endpoint at {request.path!r}")


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON; send finite numbers")


def parse_json_body(request: HttpRequest) -> tuple[Any, JsonResponse | None]:
    """The JSON body, or a 400: strict JSON (no NaN/Infinity), nested at most MAX_DEPTH levels."""
    try:
        data = json.loads(request.body or b"null", parse_constant=_no_constant)
    except RecursionError:
        return None, json_error(400, f"body is nested too deeply (at most {MAX_DEPTH} levels)")
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, a constant, an int of > 4300 digits
        return None, json_error(400, f"body is not valid JSON: {exc}")
    if problem := json_problem(data):
        return None, json_error(400, f"body {problem}")
    return data, None


def pydantic_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """Errors as [{field: "a.b", message: ...}], the shape every 400 answer uses."""
    return [
        {"field": ".".join(str(p) for p in err["loc"]) or "(body)", "message": err["msg"]}
        for err in exc.errors(include_url=False)
    ]


def validate_body(schema: type[BaseModel], request: HttpRequest):
    """(instance, None) or (None, 400 response naming each bad field). Strict: JSON's types are
    taken as they are (`false` is no priority, `0` no boolean, `1.5` no whole number); only a whole
    number stands for a float."""
    data, error = parse_json_body(request)
    if error:
        return None, error
    try:
        return schema.model_validate(data, strict=True), None
    except ValidationError as exc:
        return None, json_error(400, "invalid request", pydantic_errors(exc))
