"""Alerts a trainer raises itself (the SDK's `alert(title, text)`, through the run's updates
endpoint): stored on the run like a rule's alert and notified the same way."""

from __future__ import annotations

from celery import current_app
from django.db import transaction

from orchestrator.alerts.models import TRAINER, Alert
from orchestrator.alerts.services import NOTIFY_TASK


def trainer_alert_create(*, run, title: str, text: str, level: str) -> int:
    """The run's alert from its trainer; its id. Notification is sent once the alert commits."""
    message = title + (f": {text}" if text else "")
    if level != "info":
        message = f"[{level}] {message}"
    with transaction.atomic():
        alert = Alert.objects.create(run=run, attempt=run.attempt, kind=TRAINER, message=message)
        alert_id = alert.pk
        transaction.on_commit(lambda: current_app.send_task(NOTIFY_TASK, args=[alert_id]), robust=True)
    return alert_id
