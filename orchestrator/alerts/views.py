"""Alerts in the API: a run's alerts and rules (POST sets one of the run's own rules), and a
project's rules and notification settings (POST by its owners)."""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_http_methods
from pydantic import BaseModel, ConfigDict

from orchestrator.accounts.decorators import api_view
from orchestrator.accounts.services import api_token_lookup
from orchestrator.alerts.selectors import project_alerts_data, run_alerts_data
from orchestrator.alerts.services import RuleError, alert_rule_set, project_notifications_set
from orchestrator.experiments.access import get_project_for_user, get_run_for_user, role_in
from orchestrator.experiments.models import Membership
from orchestrator.lib.api import bearer_token, json_error, validate_body


class RuleIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    kind: str
    enabled: bool = True
    threshold: float | None = None
    window_s: int | None = None
    action: str = "notify"


class NotificationsIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    webhook_url: str | None = None
    emails: list[str] | None = None
    email_owner: bool | None = None


class ProjectAlertsIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    rule: RuleIn | None = None
    notifications: NotificationsIn | None = None


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


@api_view
@require_http_methods(["GET", "POST"])
def project_alerts(request: HttpRequest, name: str):
    if request.method == "GET":
        project = get_project_for_user(request.user, name)
        return JsonResponse(project_alerts_data(project, show_secrets=sees_secrets(request, project)))
    project = get_project_for_user(request.user, name, manage=True)
    body, error = validate_body(ProjectAlertsIn, request)
    if error:
        return error
    for part, service in (("rule", alert_rule_set), ("notifications", project_notifications_set)):
        if (values := getattr(body, part)) is None:
            continue
        try:
            service(project=project, **values.model_dump())
        except RuleError as exc:
            return json_error(400, "invalid request", [{**e, "field": f"{part}.{e['field']}"} for e in exc.errors])
    return JsonResponse(project_alerts_data(project, show_secrets=sees_secrets(request, project)))


def sees_secrets(request: HttpRequest, project) -> bool:
    """The project's owners (and staff) see its notification secrets; not with a read-only token,
    which is made to be handed to scripts and dashboards that only read."""
    token = bearer_token(request)
    if token is not None and (api_token := api_token_lookup(token)) is not None and api_token.read_only:
        return False
    return request.user.is_staff or role_in(request.user, project.pk) == Membership.Role.OWNER
