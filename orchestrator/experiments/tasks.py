"""Celery tasks of the experiments app: thin wrappers around one service each."""

from celery import shared_task


@shared_task(ignore_result=True)
def expire_external_runs() -> None:
    from orchestrator.experiments.external_runs import external_runs_expire

    external_runs_expire()
