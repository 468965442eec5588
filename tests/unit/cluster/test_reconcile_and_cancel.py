"""Reconciling with the backend's own record, and cancels that never silently do nothing:
the real local backend with real processes (short Python jobs in place of the trainer)."""

import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.cluster.backends.base import JobSpec, job_name
from orchestrator.cluster.backends.local import LocalBackend
from orchestrator.cluster.models import Job
from orchestrator.cluster.services import reconcile_submissions, run_cancel, sync_active_runs
from orchestrator.experiments.models import Run, RunEvent
from orchestrator.experiments.services import experiment_create, run_request_cancel, run_transition
from orchestrator.experiments.tokens import new_salt
from trainer.cli import CANCEL_MARKER

pytestmark = pytest.mark.django_db
S = Run.State

# Keeps the trainer's contract: SIGINT is a cancel (exit 130), SIGUSR1 the cluster's stop (75).
SLEEPER = """
import signal, sys, time
signal.signal(signal.SIGINT, lambda *_: sys.exit(130))
signal.signal(signal.SIGUSR1, lambda *_: sys.exit(75))
print("up", flush=True)
time.sleep(120)
"""


@pytest.fixture
def local(settings, tmp_path):
    settings.LOCAL_JOBS_DIR = tmp_path / "jobs"
    settings.RUNS_DIR = tmp_path / "runs"
    settings.CANCEL_GRACE_SECONDS = 5
    settings.SUBMIT_STALE_SECONDS = 60
    settings.LOST_GRACE_SECONDS = 0
    return LocalBackend()


def claimed_run(alice, config, tmp_path, *, ago_s: float = 30) -> Run:
    """A run its submit task claimed `ago_s` seconds ago and then died, recording no job id."""
    run = experiment_create(owner=alice, name="r", config=config).runs.get()
    assert run_transition(
        run=run,
        to=S.SUBMITTED,
        attempt=1,
        token_salt=new_salt(),
        backend="local",
        run_dir=str(tmp_path / "runs" / f"run-{run.pk}"),
    )
    Run.objects.filter(pk=run.pk).update(submitted_at=timezone.now() - timedelta(seconds=ago_s))
    run.refresh_from_db()
    return run


def start_job(backend: LocalBackend, run: Run, code: str) -> str:
    run_dir = tmp = backend.jobs_dir.parent / "runs" / f"run-{run.pk}"
    tmp.mkdir(parents=True, exist_ok=True)
    return backend.submit(
        JobSpec(run_id=run.pk, attempt=run.attempt, run_dir=run_dir, argv=[sys.executable, "-c", code])
    )


def wait_state(run: Run, states, timeout=30.0) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sync_active_runs()
        run.refresh_from_db()
        if run.state in states:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run stayed {run.state}: {run.state_reason}")


def test_a_submit_that_died_after_starting_the_job_is_found_by_name_and_finalised(alice, tiny_config, local, tmp_path):
    run = claimed_run(alice, tiny_config, tmp_path)
    job_id = start_job(local, run, "print('trained')")  # the job started; the database never heard of it

    assert reconcile_submissions() == 1
    run.refresh_from_db()
    assert run.job_id == job_id == job_name(run.pk, 1)
    assert Job.objects.get(run=run, attempt=1).job_id == job_id
    run = wait_state(run, {S.SUCCEEDED})
    assert run.exit_code == 0
    assert list(run.events.values_list("to_state", flat=True)) == ["submitted", "pending", "running", "succeeded"]


def test_a_claim_whose_submit_never_started_a_job_is_submitted_again_once(
    alice, tiny_config, local, tmp_path, settings
):
    run = claimed_run(alice, tiny_config, tmp_path, ago_s=120)
    assert reconcile_submissions() == 1  # nothing on the backend: a new submit of the same attempt
    run.refresh_from_db()
    assert run.attempt == 1 and run.job_id == job_name(run.pk, 1)
    assert reconcile_submissions() == 0  # recorded: nothing left to repair
    assert sorted(p.name for p in local.jobs_dir.iterdir()) == [job_name(run.pk, 1)]
    run_cancel(run_id=run.pk)  # the real trainer would start now; stop it
    wait_state(run, {S.CANCELLED}, timeout=60)


def test_a_fresh_claim_without_a_job_is_left_to_its_submit_task(alice, tiny_config, local, tmp_path):
    run = claimed_run(alice, tiny_config, tmp_path, ago_s=10)
    assert reconcile_submissions() == 0
    run.refresh_from_db()
    assert run.state == S.SUBMITTED and not run.job_id and not any(local.jobs_dir.iterdir())


def test_cancel_without_a_job_id_finds_the_job_by_name_and_stops_it(alice, tiny_config, local, tmp_path):
    run = claimed_run(alice, tiny_config, tmp_path, ago_s=1)
    start_job(local, run, SLEEPER)
    out = local.log_paths(tmp_path / "runs" / f"run-{run.pk}", 1)["stdout"]
    deadline = time.monotonic() + 20
    while not (out.exists() and "up" in out.read_text()):  # its signal handlers are in place
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert run_request_cancel(run=run)
    assert run_cancel(run_id=run.pk) is True
    run.refresh_from_db()
    assert run.job_id and run.state_reason.startswith("cancelling")
    assert (tmp_path / "runs" / f"run-{run.pk}" / CANCEL_MARKER).exists()  # the trainer's cue on SIGTERM
    run = wait_state(run, {S.CANCELLED})
    assert run.exit_code == 130


def test_the_syncs_resend_of_a_cancel_writes_the_marker_the_trainer_reads(alice, tiny_config, local, tmp_path):
    """A cancel requested while no worker ran run_cancel (an alert's auto-cancel, a worker down)
    reaches the job through the sync's re-send; the marker goes with it, or a trainer stopped by
    SIGTERM/SIGUSR1 takes the cancel for a preemption and stops for a requeue (exit 75)."""
    run = claimed_run(alice, tiny_config, tmp_path, ago_s=1)
    job_id = start_job(local, run, SLEEPER)
    Run.objects.filter(pk=run.pk).update(job_id=job_id)
    out = local.log_paths(tmp_path / "runs" / f"run-{run.pk}", 1)["stdout"]
    deadline = time.monotonic() + 20
    while not (out.exists() and "up" in out.read_text()):  # its signal handlers are in place
        assert time.monotonic() < deadline
        time.sleep(0.05)
    marker = tmp_path / "runs" / f"run-{run.pk}" / CANCEL_MARKER
    assert run_request_cancel(run=run) and not marker.exists()  # requested; the cancel task never ran
    sync_active_runs()
    assert marker.exists()
    assert wait_state(run, {S.CANCELLED}).exit_code == 130


def test_cancel_before_any_job_exists_says_so_and_ends_the_run_when_the_claim_goes_stale(
    alice, tiny_config, local, tmp_path, settings
):
    run = claimed_run(alice, tiny_config, tmp_path, ago_s=1)
    assert run_request_cancel(run=run)
    assert run_cancel(run_id=run.pk) is False
    run.refresh_from_db()
    assert (
        run.state == S.SUBMITTED
        and run.state_reason == "cancelling: waiting for the job to be created, then stopping it"
    )
    settings.SUBMIT_STALE_SECONDS = 0
    Run.objects.filter(pk=run.pk).update(submitted_at=timezone.now() - timedelta(seconds=10))
    assert reconcile_submissions() == 1
    run.refresh_from_db()
    assert run.state == S.CANCELLED and run.state_reason == "cancelled before its job started"
    assert not any(local.jobs_dir.iterdir())  # never submitted


def test_cancel_request_is_visible_at_once_with_one_history_line(alice, tiny_config, local, tmp_path):
    run = claimed_run(alice, tiny_config, tmp_path, ago_s=1)
    assert run_request_cancel(run=run) and run_request_cancel(run=run)  # a double click
    run.refresh_from_db()
    assert run.cancel_requested and run.state_reason.startswith("cancelling")
    assert list(RunEvent.objects.filter(run=run, detail="cancel requested").values_list("from_state", "to_state")) == [
        ("submitted", "submitted")
    ]


def test_a_lost_run_whose_job_ended_is_finalised_from_exit_json(alice, tiny_config, local, tmp_path):
    run = claimed_run(alice, tiny_config, tmp_path, ago_s=1)
    job_id = start_job(local, run, "import sys; sys.exit(3)")
    Run.objects.filter(pk=run.pk).update(job_id=job_id)
    run.refresh_from_db()
    assert run_transition(run=run, to=S.LOST, reason="the job disappeared")  # e.g. the sync missed it
    run = wait_state(run, {S.FAILED})
    assert run.exit_code == 3 and "recorded late" in run.state_reason


def test_the_runs_table_and_run_page_show_cancelling_instead_of_the_cancel_button(
    alice, tiny_config, local, tmp_path, client
):
    run = claimed_run(alice, tiny_config, tmp_path, ago_s=1)
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "Cancel run" in page and "state-cancelling" not in page
    response = client.post(f"/runs/{run.pk}/cancel", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="run-facts")
    facts = response.content.decode()
    assert 'id="cancel-pending"' in facts and "Cancel run" not in facts
    assert 'class="state state-cancelling" id="run-state" hx-swap-oob="true"' in facts
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "cancel requested" in page and ">cancelling</span>" in page
    table = client.get("/").content.decode()
    assert ">cancelling</span>" in table and "cancelling…" in table and "Cancel r" not in table
