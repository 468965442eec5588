"""Celery tasks of the alerts: the time rules on beat, and notifications (retried, off the
ingestion path; services.alert_fire enqueues notify_alert by its name, services.NOTIFY_TASK)."""

from celery import shared_task

from orchestrator.alerts.services import alert_notify, alerts_check_time
from orchestrator.alerts.webhook import WebhookError


@shared_task(ignore_result=True)
def check_alerts() -> None:
    alerts_check_time()


@shared_task(acks_late=True, autoretry_for=(WebhookError,), retry_backoff=10, retry_backoff_max=300, max_retries=5)
def notify_alert(alert_id: int) -> None:
    alert_notify(alert_id=alert_id)
