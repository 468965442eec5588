"""Metric endpoints: ingestion (run token), series and compare JSON, the live SSE stream. Views
stay thin: access helper, parameter check, one service or selector."""

import difflib

import msgspec
import numpy as np
from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_not_required
from django.core.handlers.asgi import ASGIRequest
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from orchestrator.accounts.decorators import api_view
from orchestrator.experiments.access import get_run_for_user
from orchestrator.experiments.models import Run
from orchestrator.lib.api import bearer_token, json_error, nul_in_url, parse_json_body
from orchestrator.lib.bounds import parse_id
from orchestrator.metrics import ingest_queue, live, selectors
from orchestrator.metrics.access import (
    MAX_COMPARE_RUNS,
    ParamError,
    authenticated_run,
    run_ids_param,
    visible_ids,
)
from orchestrator.metrics.ingest_queue import busy_response
from orchestrator.metrics.models import RunHistogram, RunTable
from orchestrator.metrics.pipeline import Busy
from orchestrator.metrics.schemas import MAX_REFUSALS_LISTED, MAX_STEP, BatchError, decode_batch, encode_value
from orchestrator.metrics.services import metrics_ingest, metrics_ingest_points, run_heartbeat
from orchestrator.metrics.updates import UpdateError, apply_update


@csrf_exempt
@login_not_required
@require_http_methods(["GET", "POST"])
async def run_metrics(request: HttpRequest, run_id: int):
    """POST: ingestion, admitted token first and counted per run before it waits for the worker's
    thread (ingest_queue), so a deep queue is answered 429 at once. GET: the series (sync)."""
    if request.method == "POST":
        return await ingest_queue.admit(request, run_id, _ingest)
    return await sync_to_async(_series)(request, run_id)


def _ingest(request: HttpRequest, run: Run, raw: bytes):
    decoded = decode_batch(raw) if request.content_type == "application/json" else None
    if decoded is not None:
        attempt, points = decoded
        attempt = run.attempt if attempt is None else attempt
    else:
        body, error = parse_json_body(request)
        if error:
            return error
        if not isinstance(body, dict) or "points" not in body:
            return json_error(400, "invalid batch", [{"field": "points", "message": "field required"}])
        attempt, points = body.get("attempt", run.attempt), body["points"]
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt != run.attempt:
        return json_error(
            400, "invalid batch", [{"field": "attempt", "message": f"must be the run's current attempt {run.attempt}"}]
        )
    try:
        if decoded is not None:  # msgspec checked every point
            stored, refused, refused_keys = metrics_ingest(run=run, attempt=attempt, points=points), [], {}
        else:
            parsed = metrics_ingest_points(run=run, attempt=attempt, points=points)
            stored, refused, refused_keys = len(parsed.cols.keys), parsed.refused, parsed.refused_keys()
    except BatchError as exc:
        return json_error(400, "invalid batch: nothing was stored", exc.errors)
    except Busy:
        return busy_response(f"run {run.pk}'s batch lock was not granted in time")
    body = {"stored": stored, "refused": refused[:MAX_REFUSALS_LISTED], "refused_keys": refused_keys}
    if len(refused) > MAX_REFUSALS_LISTED:
        body["refused_total"] = len(refused)
    return JsonResponse(body, status=202)


def _int_param(request: HttpRequest, name: str, default=None, *, low: int = 0, high: int | None = None):
    raw = request.GET.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw) if len(raw) <= 30 else int("x")
    except ValueError:
        raise ParamError(name, f"must be an integer, got {raw!r}") from None
    if value < low or (high is not None and value > high):
        raise ParamError(name, f"must be between {low} and {high}" if high else f"must be >= {low}")
    return value


def _window_params(request: HttpRequest) -> dict:
    params = {
        "start": _int_param(request, "start", high=MAX_STEP),
        "end": _int_param(request, "end", high=MAX_STEP),
        "max_points": _int_param(
            request, "max_points", selectors.DEFAULT_MAX_POINTS, low=2, high=selectors.MAX_MAX_POINTS
        ),
        "field": request.GET.get("field", "value"),
    }
    if params["field"] not in ("value", "time"):
        raise ParamError("field", "must be value or time")
    if params["start"] is not None and params["end"] is not None and params["end"] < params["start"]:
        raise ParamError("end", "must be >= start")
    return params


def _points_json(points: list[tuple]) -> list[tuple]:
    """(step, value, special) rows as the API's [step, value] pairs, NaN and ±inf as encode_value's
    strings. Zipped in C and patched where a value is not finite: a page's first panels are 10^4-10^5
    points, and a per-point Python check cost more than the queries behind them."""
    if not points:
        return []
    steps, values, specials = zip(*points, strict=True)
    pairs = list(zip(steps, values, strict=True))
    not_finite = ~np.isfinite(np.array(values, dtype=float)) | np.array(specials, dtype=bool)  # None is NaN here
    for i in np.flatnonzero(not_finite).tolist():
        pairs[i] = (steps[i], encode_value(values[i], specials[i]))
    return pairs


_encode_json = msgspec.json.Encoder().encode


def _series_response(body: dict) -> HttpResponse:
    """The series answers: a page's first panels are 10^4-10^5 floats, which msgspec encodes several
    times faster than JsonResponse's json module (the same numbers, in shortest round-trip form)."""
    return HttpResponse(_encode_json(body), content_type="application/json")


MAX_KEYS_PER_CALL = 50
SHOW_KNOWN = 40  # known keys named in a 404


def _key_param(request: HttpRequest, *, many: bool = False) -> list[str]:
    """The requested keys: key=a&key=b, or key=a,b. A key is any printable text, so a value that is
    itself a stored key (commas, spaces and all) is taken whole; otherwise it is split at commas.
    One call of the compare endpoint takes one key, and says so rather than using the last of several."""
    keys = list(dict.fromkeys(k for raw in request.GET.getlist("key") for k in _split_keys(raw)))
    if not keys:
        raise ParamError("key", "required, e.g. key=train/reward_mean (several: key=a&key=b or key=a,b)")
    if not many and len(keys) > 1:
        raise ParamError("key", f"one key per call here, got {len(keys)}: {', '.join(keys)[:200]}")
    if len(keys) > MAX_KEYS_PER_CALL:
        raise ParamError("key", f"at most {MAX_KEYS_PER_CALL} keys per call, got {len(keys)}")
    return keys


def _split_keys(raw: str) -> list[str]:
    if raw and (("," not in raw and raw.strip() == raw) or selectors.key_exists(raw)):
        return [raw]
    return [k.strip() for k in raw.split(",") if k.strip()]


def _unknown_keys(asked: list[str], known: list[str], whose: str):
    """None when every asked key is known, else the 404 that names the known keys, the nearest first."""
    missing = [k for k in asked if k not in set(known)]
    if not missing:
        return None
    near = [k for m in missing for k in difflib.get_close_matches(m, known, n=5, cutoff=0.6)]
    known = list(dict.fromkeys(near + known))  # a run logs dozens of keys: the ones a typo meant come first
    shown = ", ".join(known[:SHOW_KNOWN]) + (f" and {len(known) - SHOW_KNOWN} more" if len(known) > SHOW_KNOWN else "")
    listed = f"known keys: {shown}" if known else "no metrics reported yet"
    return json_error(
        404,
        f"{whose} has no metric {', '.join(repr(k) for k in missing)[:300]}; {listed}",
        [{"field": "key", "message": listed}],
    )


@api_view
def _series(request: HttpRequest, run_id: int):
    """{"series": [{"key", "points": [[step, value]...]}...], "seq", "attempts"} for one or several
    keys (one key also answers "key" and "points" at the top, as before). seq is the live stream
    position this answer reflects (open the stream with after=seq). A key the run does not have
    is a 404 naming the keys it has. `step` is the optimizer update count."""
    run = get_run_for_user(request.user, run_id)
    try:
        keys, params = _key_param(request, many=True), _window_params(request)
    except ParamError as exc:
        return json_error(400, "invalid query", [{"field": exc.field, "message": exc.message}])
    if error := _unknown_keys(keys, selectors.run_keys(run.pk), f"run {run.pk}"):
        return error
    seq = selectors.current_seq(run.pk)
    series = [{"key": key, "points": _points_json(selectors.series([run.pk], key, **params)[run.pk])} for key in keys]
    body = {"series": series, "seq": seq, "attempts": selectors.attempt_starts([run.pk]).get(run.pk, [])}
    if len(keys) == 1:
        body.update(series[0])
    return _series_response(body)


# a call's runs x keys: one key of 200 runs, or the first panels' keys of a few runs (8 x 25)
MAX_COMPARE_SERIES = MAX_COMPARE_RUNS


@api_view
def compare_series(request: HttpRequest):
    """Keys of many runs, each key on one bucket grid: {"series": [{"key", "runs": [{"run",
    "points", "attempts"}]}]}, one entry per key in the order asked, so that a page's first panels
    come in one call (one key also answers "key" and "runs" at the top, as before several keys).
    At most MAX_COMPARE_SERIES runs x keys. A key that none of the runs has is a 404 naming the
    keys they have."""
    try:
        ids, keys, params = run_ids_param(request), _key_param(request, many=True), _window_params(request)
        if len(ids) * len(keys) > MAX_COMPARE_SERIES:
            raise ParamError(
                "key", f"at most {MAX_COMPARE_SERIES} series (runs x keys) per call, got {len(ids)} x {len(keys)}"
            )
    except ParamError as exc:
        return json_error(400, "invalid query", [{"field": exc.field, "message": exc.message}])
    ids = visible_ids(request.user, ids)
    if error := _unknown_keys(keys, selectors.keys_of(ids), f"none of runs {', '.join(map(str, ids))[:100]}"):
        return error
    attempts = selectors.attempt_starts(ids)
    series = [{"key": key, "runs": _compare_runs_json(ids, key, params, attempts)} for key in keys]
    body = {"series": series}
    if len(keys) == 1:
        body.update(series[0])
    return _series_response(body)


def _compare_runs_json(ids: list[int], key: str, params: dict, attempts: dict) -> list[dict]:
    per_run = selectors.series(ids, key, **params)
    return [{"run": rid, "points": _points_json(per_run[rid]), "attempts": attempts.get(rid, [])} for rid in ids]


@api_view
def run_metric_keys(request: HttpRequest, run_id: int):
    run = get_run_for_user(request.user, run_id)
    return JsonResponse({"keys": selectors.run_keys(run.pk)})


@login_not_required
async def run_stream(request: HttpRequest, run_id: int):
    """Server-Sent Events of a run's new points. Resumes after Last-Event-ID (or ?after=);
    ?keys=a,b limits the keys sent. Authenticates like the API: session or personal token."""
    from orchestrator.accounts.services import user_for_api_token

    if (token := bearer_token(request)) is not None:
        user = await sync_to_async(user_for_api_token)(token)
        if user is None:
            return json_error(401, "invalid API token")
    else:
        user = await request.auser()
    if not user.is_authenticated:
        return json_error(401, "authentication required: log in or send Authorization: Bearer <token>")
    if bad := nul_in_url(request):  # keys= reaches a query
        return bad
    try:
        run = await sync_to_async(_run_then_release_db)(user, run_id)
    except Http404 as exc:
        return json_error(404, str(exc))
    raw_after = request.headers.get("Last-Event-ID") or request.GET.get("after") or "0"
    after = parse_id(raw_after)
    if after is None:
        return json_error(
            400, "invalid query", [{"field": "after", "message": f"must be a whole number, got {raw_after[:40]!r}"}]
        )
    # key=a&key=b names keys exactly (they may hold commas); keys=a,b is the older form
    keys = set(request.GET.getlist("key")) | {k for k in request.GET.get("keys", "").split(",") if k} or None
    if not isinstance(request, ASGIRequest):
        # Under WSGI (manage.py runserver) a stream would pin a worker forever: answer what is
        # new and let EventSource reconnect (retry: 2000) with Last-Event-ID, a gap-free poll.
        body = await sync_to_async(live.snapshot)(run.pk, after, keys)
        return HttpResponse(body, content_type="text/event-stream")
    response = StreamingHttpResponse(live.stream(run.pk, after, keys), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _run_then_release_db(user, run_id: int) -> Run:
    """The access check, without keeping a database connection for the stream's lifetime."""
    try:
        return get_run_for_user(user, run_id)
    finally:
        live.release_db()


@csrf_exempt
@login_not_required
@require_http_methods(["POST"])
def run_heartbeat_view(request: HttpRequest, run_id: int):
    run, body, error = authenticated_run(request, run_id)
    if error:
        return error
    body = body if isinstance(body, dict) else {}
    step, total = body.get("step"), body.get("total_steps")
    for field, value in (("step", step), ("total_steps", total)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_STEP):
            return json_error(
                400, "invalid heartbeat", [{"field": field, "message": f"must be an integer from 0 to {MAX_STEP}"}]
            )
    run_heartbeat(run=run, step=step, total_steps=total)
    return JsonResponse({"ok": True})


@csrf_exempt
@login_not_required
@require_http_methods(["POST"])
def run_updates(request: HttpRequest, run_id: int):
    """Config, summary, metric definitions, alerts, histograms and tables of a run, with its
    token: {"kind": ..., ...} (updates.py). 200 {"ok": true} or 400 naming the field."""
    run, body, error = authenticated_run(request, run_id)
    if error:
        return error
    try:
        done = apply_update(run=run, body=body)
    except UpdateError as exc:
        return json_error(exc.status, "invalid update", [{"field": exc.field, "message": exc.message}])
    return JsonResponse({"ok": True, **done})


MAX_LOGGED_OBJECTS = 500  # histograms or tables of one key in one answer, the newest steps


def _logged(request: HttpRequest, run_id: int, model, fields: tuple[str, ...], plural: str):
    run = get_run_for_user(request.user, run_id)
    rows = model.objects.filter(run=run)
    key = request.GET.get("key")
    if not key:
        return JsonResponse({"keys": sorted(set(rows.values_list("key", flat=True)))})
    found = list(rows.filter(key=key).order_by("-step").values("step", *fields)[:MAX_LOGGED_OBJECTS])
    if not found and not rows.filter(key=key).exists():
        known = sorted(set(rows.values_list("key", flat=True)))
        return json_error(
            404,
            f"run {run.pk} has no {plural[:-1]} {key[:300]!r}",
            [{"field": "key", "message": f"known: {', '.join(known)[:500] or 'none'}"}],
        )
    return JsonResponse({"key": key, plural: found[::-1]})


@api_view
def run_histograms(request: HttpRequest, run_id: int):
    """{"key", "histograms": [{"step", "bins", "counts"}]} in step order; without key, {"keys"}."""
    return _logged(request, run_id, RunHistogram, ("bins", "counts"), "histograms")


@api_view
def run_tables(request: HttpRequest, run_id: int):
    """{"key", "tables": [{"step", "columns", "rows"}]} in step order; without key, {"keys"}."""
    return _logged(request, run_id, RunTable, ("columns", "rows"), "tables")
