"""A cancel that arrives while a run is being submitted (claimed, no job id yet) still stops
the job once it exists: real local backend, real trainer process."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.cluster.backends import JobState
from orchestrator.cluster.backends.local import LocalBackend
from orchestrator.cluster.services import run_submit
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create, run_request_cancel, run_transition
from orchestrator.experiments.tokens import new_salt

pytestmark = pytest.mark.django_db


def test_cancel_requested_during_submission_cancels_the_new_job(alice, tiny_config, settings, tmp_path):
    settings.LOCAL_JOBS_DIR = tmp_path / "jobs"
    settings.RUNS_DIR = tmp_path / "runs"
    settings.CANCEL_GRACE_SECONDS = 5
    run = experiment_create(owner=alice, name="race", config=tiny_config).runs.get()
    # The submit task has claimed the run but not yet created the job ...
    assert run_transition(run=run, to=Run.State.SUBMITTED, attempt=1, token_salt=new_salt(), backend="local")
    # ... when the user cancels: there is no job id for the cancel task to act on.
    assert run_request_cancel(run=run)
    # The submit task died; once its claim is stale another submit may take it over.
    Run.objects.filter(pk=run.pk).update(
        submitted_at=timezone.now() - timedelta(seconds=settings.SUBMIT_STALE_SECONDS + 1)
    )

    assert run_submit(run_id=run.pk)  # the retried submit creates the job

    job_id = Run.objects.get(pk=run.pk).job_id
    backend = LocalBackend()
    deadline = time.monotonic() + 60
    status = None
    while time.monotonic() < deadline:
        status = backend.statuses([job_id]).get(job_id)
        if status and status.state.is_terminal:
            break
        time.sleep(0.2)
    assert status is not None and status.state == JobState.CANCELLED, status
