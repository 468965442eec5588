from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from orchestrator.api import api_view, bearer_token, json_error, parse_json_body
from orchestrator.experiments.access import get_run_for_user
from orchestrator.experiments.models import Run
from orchestrator.experiments.tokens import run_token_matches
from orchestrator.metrics.schemas import encode_value
from orchestrator.metrics.services import BatchError, metric_series, metrics_ingest, parse_points, run_heartbeat


def _authenticated_run(request: HttpRequest, run_id: int):
    """(run, None) when the request carries this run's own token, else (None, error)."""
    run = Run.objects.filter(pk=run_id).first()
    token = bearer_token(request)
    if token is None:
        return None, json_error(401, "missing run token: send Authorization: Bearer <token>")
    if run is None:
        return None, json_error(404, f"run {run_id} does not exist")
    if not run_token_matches(run, token):
        return None, json_error(403, "this token cannot write to this run")
    return run, None


@csrf_exempt
@login_not_required
@require_http_methods(["GET", "POST"])
def run_metrics(request: HttpRequest, run_id: int):
    if request.method == "POST":
        return _ingest(request, run_id)
    return _series(request, run_id)


def _ingest(request: HttpRequest, run_id: int):
    run, error = _authenticated_run(request, run_id)
    if error:
        return error
    body, error = parse_json_body(request)
    if error:
        return error
    if not isinstance(body, dict) or "points" not in body:
        return json_error(400, "invalid batch", [{"field": "points", "message": "field required"}])
    attempt = body.get("attempt", run.attempt)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt != run.attempt:
        return json_error(400, "invalid batch",
                          [{"field": "attempt", "message": f"must be the run's current attempt {run.attempt}"}])
    try:
        points = parse_points(body["points"])
    except BatchError as exc:
        return json_error(400, "invalid batch: nothing was stored", exc.errors)
    stored = metrics_ingest(run=run, attempt=attempt, points=points)
    return JsonResponse({"stored": stored}, status=202)


@api_view
def _series(request: HttpRequest, run_id: int):
    run = get_run_for_user(request.user, run_id)
    key = request.GET.get("key", "train/reward_mean")
    points = [[step, encode_value(value)] for step, value in metric_series(run=run, key=key)]
    return JsonResponse({"key": key, "points": points})


@csrf_exempt
@login_not_required
@require_http_methods(["POST"])
def run_heartbeat_view(request: HttpRequest, run_id: int):
    run, error = _authenticated_run(request, run_id)
    if error:
        return error
    body, error = parse_json_body(request)
    if error:
        return error
    body = body if isinstance(body, dict) else {}
    step, total = body.get("step"), body.get("total_steps")
    for field, value in (("step", step), ("total_steps", total)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            return json_error(400, "invalid heartbeat", [{"field": field, "message": "must be a non-negative integer"}])
    run_heartbeat(run=run, step=step, total_steps=total)
    return JsonResponse({"ok": True})
