"""Reads: a run's alerts with its effective rules (API and run page), and the rule forms' context."""

from dataclasses import asdict

from django.urls import reverse

from orchestrator.alerts import rules as alert_rules
from orchestrator.alerts.models import Alert, AlertRule, ProjectNotifications
from orchestrator.alerts.services import effective_rules
from orchestrator.experiments.models import Run


def run_alerts_data(run: Run) -> dict:
    rules = effective_rules(run)
    return {
        "run": run.pk,
        "alerts": [a.to_dict() for a in Alert.objects.filter(run=run)],
        "rules": [{**asdict(r), "description": r.describe()} for r in rules.values()],
    }


def project_alerts_data(project, *, show_secrets: bool) -> dict:
    """A project's rules (the defaults with its own overrides) and where its alerts go. The webhook
    URL (a Slack-style URL is itself a credential) and the extra addresses are shown only when
    `show_secrets` (the project's owners); others see that each is set, as "set"."""
    rules = dict(alert_rules.DEFAULTS)
    for row in AlertRule.objects.filter(project=project):
        rules[row.kind] = alert_rules.Rule(row.kind, row.enabled, row.threshold, row.window_s, row.action, "project")
    prefs = ProjectNotifications.objects.filter(project=project).first() or ProjectNotifications(project=project)
    emails = [e for e in prefs.emails.split(",") if e]
    return {
        "project": project.name,
        "rules": [{**asdict(r), "description": r.describe()} for r in rules.values()],
        "notifications": {
            "webhook_url": prefs.webhook_url if show_secrets else masked(prefs.webhook_url),
            "emails": emails if show_secrets else [masked(e) for e in emails],
            "email_owner": prefs.email_owner,
            "masked": not show_secrets,
        },
    }


def masked(secret: str) -> str:
    """What a reader who may not see a secret sees of it: whether it is set."""
    return "set" if secret else ""


def _form_rules(rules: list[dict], posted) -> list[dict]:
    """The rules as the forms show them; the rule just tried or refused keeps the values typed in."""
    out = []
    for rule in rules:
        rule = {**rule, "threshold_text": f"{rule['threshold']:g}", "window_text": str(rule["window_s"])}
        if posted is not None and posted.get("kind") == rule["kind"]:
            rule.update(
                threshold_text=posted.get("threshold", rule["threshold_text"])[:40],
                window_text=posted.get("window_s", rule["window_text"])[:40],
                action=posted.get("action", rule["action"]),
                enabled=posted.get("enabled") == "on",
            )
        out.append(rule)
    return out


def run_rules_context(run: Run, *, can_edit: bool, posted=None, **extra) -> dict:
    """The run page's alerts card: its alerts, its effective rules and the rule forms."""
    data = run_alerts_data(run)
    return {
        **data,
        "rules": _form_rules(data["rules"], posted),
        "can_edit": can_edit,
        "save_url": reverse("alerts-run-rule-save", args=[run.pk]),
        "test_url": reverse("alerts-run-rule-test", args=[run.pk]),
        "target": "run-alerts",
        "time_kinds": alert_rules.TIME_KINDS,
        "actions": AlertRule.Action.values,
        **extra,
    }


def project_rules_context(project, *, can_edit: bool, posted=None, **extra) -> dict:
    data = project_alerts_data(project, show_secrets=can_edit)
    return {
        **data,
        "rules": _form_rules(data["rules"], posted),
        "can_edit": can_edit,
        "save_url": reverse("alerts-project-rule-save", args=[project.name]),
        "test_url": reverse("alerts-project-rule-test", args=[project.name]),
        "target": "project-rules",
        "time_kinds": alert_rules.TIME_KINDS,
        "actions": AlertRule.Action.values,
        **extra,
    }
