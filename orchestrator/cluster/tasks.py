"""Celery tasks: thin wrappers that take ids and call one service each.

On the embedded SQLite a write waits for the lock (busy timeout, IMMEDIATE transactions, see
settings); should it still time out, the services are idempotent, so the task is retried."""

from celery import shared_task
from django.db import OperationalError

from orchestrator.cluster.backends import BackendError

RETRY_ON = (BackendError, OperationalError)


@shared_task(acks_late=True, autoretry_for=RETRY_ON, retry_backoff=5, retry_backoff_max=60, max_retries=None)
def submit_run(run_id: int) -> None:
    from orchestrator.cluster.services import run_submit

    run_submit(run_id=run_id)


@shared_task(acks_late=True, autoretry_for=RETRY_ON, retry_backoff=2, retry_backoff_max=30, max_retries=10)
def cancel_run(run_id: int) -> None:
    from orchestrator.cluster.services import run_cancel

    run_cancel(run_id=run_id)


@shared_task(ignore_result=True)
def sync_runs() -> None:
    from orchestrator.cluster.services import sync_active_runs

    sync_active_runs()


@shared_task(ignore_result=True)
def dispatch_queued() -> None:
    """Submit the queued runs the queue policy picks."""
    from orchestrator.experiments.queue import runs_to_dispatch

    for run_id in runs_to_dispatch():
        submit_run.delay(run_id)
