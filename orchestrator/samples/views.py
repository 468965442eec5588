"""Sample endpoints and fragments: ingestion (the run's token, like metrics), the JSON read API,
the run page's samples view and the compare page's "same prompt across runs" section (htmx
fragments). Views stay thin: access, parameters, one service or selector, render."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from django.contrib.auth.decorators import login_not_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods

from orchestrator.accounts.decorators import api_view
from orchestrator.experiments.access import get_run_for_user
from orchestrator.experiments.models import Run
from orchestrator.lib.api import json_error
from orchestrator.metrics import ingest_queue
from orchestrator.metrics.access import ParamError, run_ids_param, visible_ids
from orchestrator.metrics.ingest_queue import busy_response
from orchestrator.metrics.pipeline import Busy
from orchestrator.samples import selectors
from orchestrator.samples.presenting import (
    SampleQuery,
    compare_context,
    compare_corrections_context,
    corrections_context,
    newer_context,
    run_samples_context,
    sample_dict,
)
from orchestrator.samples.schemas import PROMPT_HASH, BatchError, parse_batch
from orchestrator.samples.services import samples_ingest


@csrf_exempt
@login_not_required
@require_http_methods(["GET", "POST"])
async def run_samples_api(request: HttpRequest, run_id: int):
    """POST: a batch from the run's trainer (its token), admitted like metric batches and through the
    same per-run queue (429 + Retry-After when deep). GET: the samples of one recorded step."""
    if request.method == "POST":
        return await ingest_queue.admit(request, run_id, _ingest)
    return await sync_to_async(_read)(request, run_id)


def _ingest(request: HttpRequest, run: Run, raw: bytes):
    try:
        batch = parse_batch(raw)
    except BatchError as exc:
        return json_error(400, "invalid batch: nothing was stored", exc.errors)
    attempt = run.attempt if batch.attempt is None else batch.attempt
    if attempt != run.attempt:
        return json_error(
            400,
            "invalid batch: nothing was stored",
            [{"field": "attempt", "message": f"must be the run's current attempt {run.attempt}"}],
        )
    try:
        result = samples_ingest(run=run, attempt=attempt, samples=batch.samples)
    except Busy:
        return busy_response(f"run {run.pk}'s samples lock was not granted in time")
    return JsonResponse(result.to_dict())


@api_view
def _read(request: HttpRequest, run_id: int):
    """{"run", "kind", "steps": [{step, n, masked, clipped}], "step", "samples": [...]}: the newest recorded step
    unless `step` is given; `verdict` and `sort` as on the run page."""
    run = get_run_for_user(request.user, run_id)
    try:
        query = SampleQuery.from_params(request.GET, run.pk)
    except ParamError as exc:
        return json_error(400, "invalid query", [{"field": exc.field, "message": exc.message}])
    samples = (
        selectors.step_samples(run.pk, query.kind, query.step, verdict=query.verdict, sort=query.sort)
        if query.step is not None
        else []
    )
    steps = [
        {"step": st["step"], "n": st["n"], "masked": st["masked"] or 0, "clipped": st["clipped"] or 0}
        for st in query.steps
    ]
    return JsonResponse(
        {
            "run": run.pk,
            "kind": query.kind,
            "steps": steps,
            "step": query.step,
            "samples": [sample_dict(s) for s in samples],
        }
    )


@require_GET
def run_samples_fragment(request: HttpRequest, run_id: int):
    """The run page's samples card (loaded by htmx, and re-rendered whole on every choice)."""
    run = get_run_for_user(request.user, run_id)
    try:
        query = SampleQuery.from_params(request.GET, run.pk)
    except ParamError as exc:
        return render(
            request, "samples/_run_samples.html", {"run": run, "error": f"{exc.field}: {exc.message}"}, status=400
        )
    return render(request, "samples/_run_samples.html", run_samples_context(run, query))


@require_GET
def run_samples_newer(request: HttpRequest, run_id: int):
    """The live card's poll (every few seconds while the run is not over): a hint that newer
    steps were recorded, with a button that reloads the card; it never reloads it by itself.
    Its answer stops the polling once the run is over."""
    run = get_run_for_user(request.user, run_id)
    try:
        context = newer_context(run, request.GET)
    except ParamError as exc:
        return HttpResponse(f"{exc.field}: {exc.message}", status=400, content_type="text/plain")
    return render(request, "samples/_newer.html", context)


@require_GET
def compare_samples_fragment(request: HttpRequest):
    """The compare page's "same prompt across runs" card: ?runs=1,2,3[&prompt=<hash>]."""
    try:
        ids = visible_ids(request.user, run_ids_param(request))
    except ParamError as exc:
        raise Http404(exc.message) from None
    if (prompt := request.GET.get("prompt", "")) and not PROMPT_HASH.fullmatch(prompt):
        return HttpResponse(
            f"prompt: must be a prompt's hash (32 hex digits), got {prompt[:40]!r}",
            status=400,
            content_type="text/plain",
        )
    return render(request, "samples/_compare_samples.html", compare_context(ids, request.GET))


@require_GET
def run_corrections_fragment(request: HttpRequest, run_id: int):
    """The run page's contrast card: which tokens correction `a` drops that `b` keeps,
    and the reverse, over the run's recorded steps."""
    run = get_run_for_user(request.user, run_id)
    try:
        context = corrections_context(run, request.GET)
    except ParamError as exc:
        return render(
            request, "samples/_run_corrections.html", {"run": run, "error": f"{exc.field}: {exc.message}"}, status=400
        )
    return render(request, "samples/_run_corrections.html", context)


@require_GET
def compare_corrections_fragment(request: HttpRequest):
    """The compare page's contrast card: ?runs=1,2,3[&a=m2po&b=grpo], one row per run."""
    try:
        ids = visible_ids(request.user, run_ids_param(request))
        context = compare_corrections_context(ids, request.GET)
    except ParamError as exc:
        if exc.field not in ("a", "b"):
            raise Http404(exc.message) from None
        return render(
            request, "samples/_compare_corrections.html", {"error": f"{exc.field}: {exc.message}"}, status=400
        )
    return render(request, "samples/_compare_corrections.html", context)
