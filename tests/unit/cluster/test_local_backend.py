"""The local backend with real processes (no doubles): start, observe, signal, fail."""

import sys
import time
from pathlib import Path

import pytest

from orchestrator.cluster.backends.base import JobSpec, JobState
from orchestrator.cluster.backends.local import LocalBackend

# A job that keeps the trainer's signal contract (trainer/cli.py): it checkpoints, then exits 130
# on SIGINT (a person's cancel) or 75 on SIGUSR1 (the cluster's stop, e.g. a time limit).
GRACEFUL_JOB = """
import signal, sys, time, pathlib
def stop(signum, _):
    pathlib.Path("checkpointed").write_text(signal.Signals(signum).name)
    sys.exit(130 if signum == signal.SIGINT else 75)
signal.signal(signal.SIGUSR1, stop)
signal.signal(signal.SIGINT, stop)
print("started", flush=True)
time.sleep(120)
"""


def spec(tmp_path: Path, code: str, run_id: int = 1, attempt: int = 1) -> JobSpec:
    run_dir = tmp_path / f"run-{run_id}"
    run_dir.mkdir(exist_ok=True)
    return JobSpec(
        run_id=run_id,
        attempt=attempt,
        run_dir=run_dir,
        argv=[sys.executable, "-c", code],
        env={"OPL_RUN_ID": str(run_id)},
    )


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
    assert status.exit_code == 130  # told apart from a preemption: SIGINT, not SIGUSR1
    assert (job.run_dir / "checkpointed").read_text() == "SIGINT"


# A job that ignores the cancel and has started a child of its own that ignores it too (a stuck
# torchrun rank, say): after the grace period the whole job goes, not just the direct child.
STUCK_JOB_WITH_A_CHILD = """
import signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
child = subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(300)"]
)
print(child.pid, flush=True)
time.sleep(300)
"""


def test_after_the_grace_period_the_jobs_whole_process_tree_is_killed(backend, tmp_path, settings):
    import os

    settings.CANCEL_GRACE_SECONDS = 1
    job = spec(tmp_path, STUCK_JOB_WITH_A_CHILD)
    job_id = backend.submit(job)
    wait_for(backend, job_id, {JobState.RUNNING})
    deadline = time.monotonic() + 10
    while not backend.log_paths(job.run_dir, 1)["stdout"].read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int(backend.log_paths(job.run_dir, 1)["stdout"].read_text().split()[0])
    backend.cancel(job_id)
    wait_for(backend, job_id, {JobState.CANCELLED, JobState.FAILED}, timeout=30)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the job's child {grandchild} outlived the cancelled job")


def test_time_limit_sends_the_clusters_stop_signal(backend, tmp_path, settings):
    settings.CANCEL_GRACE_SECONDS = 1
    job = JobSpec(**{**spec(tmp_path, GRACEFUL_JOB).__dict__, "time_limit_min": 0.05})  # 3 s
    status = wait_for(backend, backend.submit(job), {JobState.TIMEOUT}, timeout=30)
    assert status.exit_code == 75
    assert (job.run_dir / "checkpointed").read_text() == "SIGUSR1"


def test_a_submitter_that_died_before_starting_the_job_leaves_nothing_found(backend, tmp_path):
    job = spec(tmp_path, "print('started after all', flush=True)")
    (backend.jobs_dir / job.name).mkdir(parents=True)
    (backend.jobs_dir / job.name / "lock").touch()  # its lock died with it: nobody holds it
    assert backend.find(job.name) is None and backend.statuses([job.name]) == {}
    assert backend.submit(job) == job.name
    wait_for(backend, job.name, {JobState.SUCCEEDED})
    assert backend.log_paths(job.run_dir, 1)["stdout"].read_text() == "started after all\n"


def test_a_running_job_is_found_through_its_supervisors_lock_alone(backend, tmp_path):
    job = spec(tmp_path, GRACEFUL_JOB)
    backend.submit(job)
    wait_for(backend, job.name, {JobState.RUNNING})
    (backend.jobs_dir / job.name / "submitted").unlink()  # as if the submitter died right after starting it
    (backend.jobs_dir / job.name / "job.json").rename(backend.jobs_dir / job.name / "job.json.hidden")
    assert backend.find(job.name) == job.name  # the supervisor holds the lock
    assert backend.submit(job) == job.name
    (backend.jobs_dir / job.name / "job.json.hidden").rename(backend.jobs_dir / job.name / "job.json")
    backend.cancel(job.name)
    wait_for(backend, job.name, {JobState.CANCELLED})
    assert backend.log_paths(job.run_dir, 1)["stdout"].read_text() == "started\n"  # one process


def test_submitting_the_same_attempt_twice_starts_one_process(backend, tmp_path):
    job = spec(tmp_path, "print('once', flush=True)")
    assert backend.submit(job) == backend.submit(job) == job.name
    wait_for(backend, job.name, {JobState.SUCCEEDED})
    assert backend.log_paths(job.run_dir, 1)["stdout"].read_text() == "once\n"
    assert backend.find(job.name) == job.name
    assert backend.find("opl-99-a1") is None


def test_unknown_jobs_are_absent_not_failed(backend):
    assert backend.statuses(["opl-5-a1"]) == {}
