"""Celery tasks of the metrics app: thin wrappers around one service each."""

from celery import shared_task


@shared_task(ignore_result=True)
def compact_metrics() -> None:
    from orchestrator.metrics.services import compact_recent_runs

    compact_recent_runs()
