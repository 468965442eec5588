"""Reads: a run's alerts with its effective rules (API and run page)."""

from dataclasses import asdict

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


def project_alerts_data(project) -> dict:
    """A project's rules (the defaults with its own overrides) and where its alerts go."""
    rules = dict(alert_rules.DEFAULTS)
    for row in AlertRule.objects.filter(project=project):
        rules[row.kind] = alert_rules.Rule(row.kind, row.enabled, row.threshold, row.window_s, row.action, "project")
    prefs = ProjectNotifications.objects.filter(project=project).first() or ProjectNotifications(project=project)
    return {
        "project": project.name,
        "rules": [{**asdict(r), "description": r.describe()} for r in rules.values()],
        "notifications": {
            "webhook_url": prefs.webhook_url,
            "emails": [e for e in prefs.emails.split(",") if e],
            "email_owner": prefs.email_owner,
        },
    }
