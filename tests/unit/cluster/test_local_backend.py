"""The local backend with real processes (no doubles): start, observe, signal, fail."""
import sys
import time
from pathlib import Path

import pytest

from orchestrator.cluster.backends.base import JobSpec, JobState
from orchestrator.cluster.backends.local import LocalBackend

# A job that behaves like the trainer on SIGUSR1: writes a checkpoint marker and exits 75.
GRACEFUL_JOB = """
import signal, sys, time, pathlib
def stop(*_):
    pathlib.Path("checkpointed").write_text("yes")
    sys.exit(75)
signal.signal(signal.SIGUSR1, stop)
print("started", flush=True)
time.sleep(60)
"""


def spec(tmp_path: Path, code: str, run_id: int = 1, attempt: int = 1) -> JobSpec:
    run_dir = tmp_path / f"run-{run_id}"
    run_dir.mkdir(exist_ok=True)
    return JobSpec(run_id=run_id, attempt=attempt, run_dir=run_dir, argv=[sys.executable, "-c", code],
                   env={"OPL_RUN_ID": str(run_id)})


def wait_for(backend, job_id, states, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = backend.statuses([job_id]).get(job_id)
        if status and status.state in states:
            return status
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never reached {states}: last {status}")


@pytest.fixture
def backend(tmp_path, settings) -> LocalBackend:
    settings.CANCEL_GRACE_SECONDS = 5
    return LocalBackend(jobs_dir=tmp_path / "jobs")


def test_job_runs_to_success_with_its_output_in_the_run_dir(backend, tmp_path):
    job = spec(tmp_path, "import os; print('hello', os.environ['OPL_RUN_ID'])")
    job_id = backend.submit(job)
    status = wait_for(backend, job_id, {JobState.SUCCEEDED})
    assert status.exit_code == 0 and status.ended_at is not None
    assert backend.log_paths(job.run_dir, 1)["stdout"].read_text() == "hello 1\n"


def test_failure_keeps_exit_code_and_stderr(backend, tmp_path):
    job = spec(tmp_path, "import sys; sys.stderr.write('boom\\n'); sys.exit(3)")
    status = wait_for(backend, backend.submit(job), {JobState.FAILED})
    assert status.exit_code == 3 and "exit code 3" in status.reason
    assert "boom" in backend.log_paths(job.run_dir, 1)["stderr"].read_text()


def test_cancel_signals_the_job_which_checkpoints(backend, tmp_path):
    job = spec(tmp_path, GRACEFUL_JOB)
    job_id = backend.submit(job)
    wait_for(backend, job_id, {JobState.RUNNING})
    deadline = time.monotonic() + 10
    while "started" not in backend.log_paths(job.run_dir, 1)["stdout"].read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    backend.cancel(job_id)
    status = wait_for(backend, job_id, {JobState.CANCELLED})
    assert status.exit_code == 75
    assert (job.run_dir / "checkpointed").read_text() == "yes"


def test_submitting_the_same_attempt_twice_starts_one_process(backend, tmp_path):
    job = spec(tmp_path, "print('once', flush=True)")
    assert backend.submit(job) == backend.submit(job) == job.name
    wait_for(backend, job.name, {JobState.SUCCEEDED})
    assert backend.log_paths(job.run_dir, 1)["stdout"].read_text() == "once\n"
    assert backend.find(job.name) == job.name
    assert backend.find("opl-99-a1") is None


def test_unknown_jobs_are_absent_not_failed(backend):
    assert backend.statuses(["opl-5-a1"]) == {}
