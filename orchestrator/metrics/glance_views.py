"""GET /api/v1/metrics/glance?experiment=<id> (or runs=1,2,3)&key=&stat=: a sweep at a glance."""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from orchestrator.accounts.decorators import api_view
from orchestrator.lib.api import json_error
from orchestrator.metrics.access import compared_runs
from orchestrator.metrics.sweep_glance import GlanceError, sweep_glance


@api_view
@require_GET
def glance(request: HttpRequest):
    runs, _ = compared_runs(request)
    try:
        body = sweep_glance(runs, key=request.GET.get("key") or None, stat=request.GET.get("stat") or "tail_mean")
    except GlanceError as exc:
        return json_error(400, str(exc), [{"field": exc.field, "message": exc.message}])
    return JsonResponse(body)
