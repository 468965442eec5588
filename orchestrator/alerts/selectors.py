"""Reads: a run's alerts with its effective rules (API and run page)."""
from dataclasses import asdict

from orchestrator.alerts.models import Alert
from orchestrator.alerts.services import effective_rules
from orchestrator.experiments.models import Run


def run_alerts_data(run: Run) -> dict:
    rules = effective_rules(run)
    return {
        "run": run.pk,
        "alerts": [a.to_dict() for a in Alert.objects.filter(run=run)],
        "rules": [{**asdict(r), "description": r.describe()} for r in rules.values()],
    }
