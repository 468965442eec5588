"""A run's alerts and rules in the API: GET lists them, POST sets one of the run's own rules."""
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_http_methods
from pydantic import BaseModel, ConfigDict

from orchestrator.alerts.selectors import run_alerts_data
from orchestrator.alerts.services import RuleError, alert_rule_set
from orchestrator.api import api_view, json_error, validate_body
from orchestrator.experiments.access import get_run_for_user


class RuleIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    kind: str
    enabled: bool = True
    threshold: float | None = None
    window_s: int | None = None
    action: str = "notify"


@api_view
@require_http_methods(["GET", "POST"])
def run_alerts(request: HttpRequest, run_id: int):
    if request.method == "GET":
        return JsonResponse(run_alerts_data(get_run_for_user(request.user, run_id)))
    run = get_run_for_user(request.user, run_id, write=True)
    body, error = validate_body(RuleIn, request)
    if error:
        return error
    try:
        alert_rule_set(run=run, **body.model_dump())
    except RuleError as exc:
        return json_error(400, "invalid rule", exc.errors)
    return JsonResponse(run_alerts_data(run))
