"""Alert rules in the browser: a run's own rules on the run page, a project's on its alerts page.
Each rule is saved, switched off or tried ("Test") in place; the bounds and messages are the API's
(services.rule_checked)."""

from django.http import HttpRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST

from orchestrator.alerts.rule_form import rule_values
from orchestrator.alerts.rule_test import rule_try
from orchestrator.alerts.selectors import project_rules_context, run_rules_context
from orchestrator.alerts.services import RuleError, alert_rule_set, rule_checked
from orchestrator.experiments.access import can_write, get_project_for_user, get_run_for_user, role_in
from orchestrator.experiments.models import Membership, Run

PROJECT_TEST_RUNS = 10  # a project's rule is tried on its newest runs


@require_POST
def run_rule_save(request: HttpRequest, run_id: int):
    run = get_run_for_user(request.user, run_id, write=True)
    errors, saved = [], ""
    try:
        values = rule_values(request.POST)
        alert_rule_set(run=run, **values)
        saved = values["kind"]
    except RuleError as exc:
        errors = exc.errors
    return _run_card(request, run, errors=errors, saved=saved, posted=None if saved else request.POST)


@require_POST
def run_rule_test(request: HttpRequest, run_id: int):
    run = get_run_for_user(request.user, run_id)
    errors, results = [], []
    try:
        results = [rule_try(rule=_tried(request.POST), run=run)]
    except RuleError as exc:
        errors = exc.errors
    return _run_card(request, run, errors=errors, results=results, posted=request.POST)


def _tried(post):
    """The posted rule as it would act when on: a switched-off rule can be tried before turning it on."""
    return rule_checked(**{**rule_values(post), "enabled": True})


def _run_card(request, run: Run, **extra):
    editable = can_write(request.user, run.owner_id, run.experiment.project_id)
    return render(request, "alerts/_run_alerts_card.html", run_rules_context(run, can_edit=editable, **extra))


@require_GET
def project_alerts_page(request: HttpRequest, name: str):
    project = get_project_for_user(request.user, name)
    return render(request, "alerts/project_alerts.html", _project_context(request, project))


@require_POST
def project_rule_save(request: HttpRequest, name: str):
    project = get_project_for_user(request.user, name, manage=True)
    errors, saved = [], ""
    try:
        values = rule_values(request.POST)
        alert_rule_set(project=project, **values)
        saved = values["kind"]
    except RuleError as exc:
        errors = exc.errors
    return render(
        request,
        "alerts/_project_rules.html",
        _project_context(request, project, errors=errors, saved=saved, posted=None if saved else request.POST),
    )


@require_POST
def project_rule_test(request: HttpRequest, name: str):
    project = get_project_for_user(request.user, name)
    errors, results = [], []
    try:
        rule = _tried(request.POST)
        runs = Run.objects.filter(experiment__project=project).order_by("-id")[:PROJECT_TEST_RUNS]
        results = [rule_try(rule=rule, run=run) for run in runs]
    except RuleError as exc:
        errors = exc.errors
    return render(
        request,
        "alerts/_project_rules.html",
        _project_context(request, project, errors=errors, results=results, posted=request.POST),
    )


def _project_context(request, project, **extra) -> dict:
    manage = request.user.is_staff or role_in(request.user, project.pk) == Membership.Role.OWNER
    return project_rules_context(project, can_edit=manage, **extra)
