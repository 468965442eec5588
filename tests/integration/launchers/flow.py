"""A user's launcher run, queued through the API and driven as Celery would drive it."""

import json
import time

from orchestrator.cluster.backends import BackendError
from orchestrator.cluster.services import run_submit, sync_active_runs
from orchestrator.experiments.models import Run
from orchestrator.experiments.queue import runs_to_dispatch


def queue_run(api_client, user, **params) -> Run:
    response = api_client(user).post(
        "/api/v1/launchers/tiny-sdk/runs", data=json.dumps({"params": params}), content_type="application/json"
    )
    assert response.status_code == 201, response.content
    return Run.objects.get(pk=response.json()["id"])


def drive(run: Run, until, timeout: float = 120) -> Run:
    """What Celery beat and the worker do: dispatch what the queue policy picks, sync active runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if until(run):
            return run
        for run_id in runs_to_dispatch():
            try:
                run_submit(run_id=run_id)
            except BackendError:
                pass  # the task would retry
        sync_active_runs()
        time.sleep(0.3)
    raise AssertionError(f"run {run.pk} stuck in {run.state}: {run.state_reason}")
