"""Runs through the orchestrator (submit, sync, requeue, health) on the real Slurm clusters.

Services are driven in-process (no Celery): `run_submit` and `sync_active_runs` are what
the Celery tasks call. The trainer in the Slurm job pushes metrics to a live server."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.cluster.backends import BackendError
from orchestrator.cluster.models import ClusterHealth, ClusterProfile, Job
from orchestrator.cluster.services import run_submit, sync_active_runs
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.chunks import live_rows
from orchestrator.metrics.models import MetricChunk
from tests.integration.slurm.conftest import PYTHON, REPO
from tests.integration.slurm.livehelpers import TINY, wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]
UPDATE_KEY = "actor/pg_loss"


@pytest.fixture
def slurm_settings(settings, cluster, live_server, tmp_path):
    settings.CLUSTER_BACKEND = "slurm"
    settings.SLURM_REST_URL = cluster.env["SLURM_REST_URL"]
    settings.SLURM_REST_USER = cluster.env["SLURM_REST_USER"]
    settings.SLURM_JWT = ""
    settings.SLURM_JWT_KEY_FILE = cluster.env["SLURM_JWT_KEY_FILE"]
    settings.SLURM_RUN_DIR_MODE = "1777"
    settings.RUNS_DIR = cluster.run_root / f"django-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    settings.TRAINER_PYTHON = PYTHON
    settings.PUBLIC_URL = live_server.url
    settings.RUNS_DIR.mkdir(parents=True)
    os.chmod(settings.RUNS_DIR, 0o1777)
    ClusterProfile.objects.create(
        name="test",
        is_default=True,
        partition=cluster.env["SLURM_PARTITION"],
        setup_lines=f"export PYTHONPATH={REPO}\nexport HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1",
    )
    return settings


def new_run(owner, steps: int = 4, ckpt_every: int = 2, **overrides) -> Run:
    config = {**TINY, "train": {"steps": steps, "seed": 1}, "checkpoint": {"every": ckpt_every, "keep": 2}}
    config.update(overrides)
    experiment = experiment_create(owner=owner, name=f"slurm-{time.time_ns()}", config=config)
    return experiment.runs.get()


def drive(run: Run, until, timeout: float = 240) -> Run:
    """Do what Celery beat does (dispatch queued runs, sync active ones) until `until(run)`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if until(run):
            return run
        if run.state == Run.State.QUEUED:
            try:
                run_submit(run_id=run.pk)
            except BackendError:
                pass  # the task would retry with backoff
        sync_active_runs()
        time.sleep(0.4)
    run.refresh_from_db()
    raise AssertionError(f"run {run.pk} stuck in {run.state}: {run.state_reason}")


def jobs_named(cluster, name: str, since: float) -> int:
    """Jobs of that name submitted since `since` (run ids restart with each test database,
    so Slurm may still remember an older job of the same name)."""
    return sum(
        1
        for j in cluster.client().jobs()
        if j.name == name and j.submit_time and j.submit_time.timestamp() >= since - 1
    )


def history(run: Run) -> list[str]:
    return list(run.events.order_by("id").values_list("to_state", flat=True))


def test_run_on_slurm_goes_pending_running_succeeded_with_metrics(slurm_settings, alice):
    run = new_run(alice, steps=4)
    run = drive(run, lambda r: r.is_terminal)
    assert run.state == "succeeded", run.state_reason
    assert history(run) == ["submitted", "pending", "running", "succeeded"]
    job = Job.objects.get(run=run, attempt=1)
    assert (job.native_state, job.exit_code, job.nodes, job.final) == ("COMPLETED", 0, "localhost", True)
    assert job.started_at and job.ended_at
    steps = [step for step, _, _ in live_rows(run.pk, UPDATE_KEY)]
    assert steps == [2, 4, 6, 8]


def test_failing_run_shows_exit_code_and_log_tail(slurm_settings, alice, client):
    run = new_run(alice)
    Run.objects.filter(pk=run.pk).update(config={**run.config, "train": {"steps": "many"}})  # invalid
    run = drive(run, lambda r: r.is_terminal)
    assert (run.state, run.exit_code) == ("failed", 2)
    assert run.state_reason == "Exited with code 2"
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/job").content.decode()
    assert "train.steps" in page and "Exited with code 2" in page


def test_too_many_gpus_fails_the_run_with_slurms_reason(slurm_settings, alice, cluster):
    ClusterProfile.objects.filter(name="test").update(gpus=int(cluster.env["SLURM_FAKE_GPUS"]) + 1)
    run = new_run(alice)
    run = drive(run, lambda r: r.is_terminal, timeout=60)
    assert run.state == "failed"
    assert "Requested node configuration is not available" in run.state_reason


def test_runs_stay_queued_while_slurmrestd_is_down_and_are_submitted_once(slurm_settings, alice, cluster):
    pid = int(cluster.rest_pid_file().read_text())
    os.kill(pid, signal.SIGINT)
    wait_until(lambda: not os.path.exists(f"/proc/{pid}"), timeout=30, what="slurmrestd to exit")
    since = time.time()
    runs = [new_run(alice, steps=1) for _ in range(2)]
    try:
        for run in runs:
            with pytest.raises(BackendError):
                run_submit(run_id=run.pk)
            run.refresh_from_db()
            assert run.state == "queued" and run.attempt == 0
            assert slurm_settings.SLURM_REST_URL in run.state_reason
        health = ClusterHealth.objects.get(backend="slurm")
        assert "unreachable" in health.last_error
    finally:
        cluster.up()
    for run in runs:
        drive(run, lambda r: r.is_terminal)
        assert run.state == "succeeded" and run.attempt == 1
        assert Job.objects.filter(run=run).count() == 1
        assert jobs_named(cluster, f"opl-{run.pk}-a1", since) == 1


def test_wrong_token_keeps_runs_queued_with_a_clear_message(slurm_settings, alice, client):
    slurm_settings.SLURM_JWT_KEY_FILE = ""
    slurm_settings.SLURM_JWT = "not.a.valid-token"
    run = new_run(alice)
    with pytest.raises(BackendError):
        run_submit(run_id=run.pk)
    run.refresh_from_db()
    assert run.state == "queued" and run.state_reason.startswith("Slurm authentication failed")
    client.force_login(alice)
    page = client.get("/cluster/health").content.decode()
    assert "Slurm authentication failed" in page and "Traceback" not in page


def test_health_view_lists_partitions_nodes_gpus_and_our_jobs(slurm_settings, alice, client):
    run = new_run(alice, steps=300, ckpt_every=1000)
    drive(run, lambda r: r.state == "running")
    client.force_login(alice)
    page = client.get("/cluster/health").content.decode()
    assert cluster_version_shown(page)
    assert "localhost" in page and "/ 4" in page  # GPUs used / total
    assert f"opl-{run.pk}-a1" in page
    from orchestrator.cluster.services import run_cancel

    wait_until(lambda: MetricChunk.objects.filter(run=run, key=UPDATE_KEY).exists(), what="a training step")
    run_cancel(run_id=run.pk)
    run = drive(run, lambda r: r.is_terminal)
    assert run.state == "cancelled"
    out = (Path(run.run_dir) / "logs" / "attempt-1.out").read_text()
    assert "checkpointing at update" in out  # the trainer got the signal and checkpointed
    # scancel's SIGTERM plus the dashboard's cancel marker: a cancel, not a preemption (exit 130)
    assert "cancelled; checkpointing" in out and "stopping for requeue" not in out
    assert any((Path(run.run_dir) / "ckpt").iterdir())


def test_submit_task_killed_after_its_post_is_retried_without_a_second_job(slurm_settings, alice, cluster):
    """A worker process runs run_submit and dies right after slurmrestd accepted the job,
    before it could record the job id; the retried task must find that job."""
    from django.conf import settings as dj

    since = time.time()
    run = new_run(alice, steps=1)
    db = dj.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "SECRET_KEY": dj.SECRET_KEY,
        "CLUSTER_BACKEND": "slurm",
        "SLURM_REST_URL": dj.SLURM_REST_URL,
        "SLURM_REST_USER": dj.SLURM_REST_USER,
        "SLURM_JWT_KEY_FILE": dj.SLURM_JWT_KEY_FILE,
        "SLURM_RUN_DIR_MODE": "1777",
        "OPL_RUNS_DIR": str(dj.RUNS_DIR),
        "OPL_TRAINER_PYTHON": PYTHON,
        "OPL_PUBLIC_URL": dj.PUBLIC_URL,
        "DJANGO_SETTINGS_MODULE": "orchestrator.settings",
    }
    code = f"""
import os, signal, django
django.setup()
from orchestrator.cluster.slurm.client import SlurmClient
real_submit = SlurmClient.submit
def submit_then_die(self, request):
    real_submit(self, request)
    os.kill(os.getpid(), signal.SIGKILL)  # the worker dies between the POST and recording the id
SlurmClient.submit = submit_then_die
from orchestrator.cluster.services import run_submit
run_submit(run_id={run.pk})
"""
    proc = subprocess.run([PYTHON, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    run.refresh_from_db()
    assert run.state == "submitted" and run.job_id == "" and run.attempt == 1
    run_submit(run_id=run.pk)  # the task's retry
    run.refresh_from_db()
    assert run.job_id
    assert jobs_named(cluster, f"opl-{run.pk}-a1", since) == 1
    run = drive(run, lambda r: r.is_terminal)
    assert run.state == "succeeded" and Job.objects.filter(run=run).count() == 1


def cluster_version_shown(page: str) -> bool:
    return "v0.0.38" in page or "v0.0.42" in page


def test_node_failure_requeues_the_run_which_resumes_with_one_metric_history(slurm_settings, alice, cluster):
    run = new_run(alice, steps=30, ckpt_every=2)
    run = drive(run, lambda r: r.state == "running")
    run_dir = run.run_dir
    wait_until(
        lambda: len(live_rows(run.pk, UPDATE_KEY)) >= 4 and any(os.scandir(f"{run_dir}/ckpt")),
        timeout=180,
        what="a checkpoint and metrics",
    )
    cluster.command("scontrol", "update", "nodename=localhost", "state=down", "reason=opl-node-fail-test")
    try:
        run = drive(run, lambda r: r.attempt == 1 and r.state == "queued", timeout=120)
    finally:
        cluster.command("scontrol", "update", "nodename=localhost", "state=resume")
    assert "requeued as attempt 2 of 3" in run.state_reason
    run = drive(run, lambda r: r.is_terminal, timeout=300)
    assert run.state == "succeeded" and run.attempt == 2, run.state_reason
    live = MetricChunk.objects.filter(run=run, key=UPDATE_KEY, superseded=False)
    steps = [step for step, _, _ in live_rows(run.pk, UPDATE_KEY)]
    assert steps == list(range(2, 61, 2)), steps  # every update once: one continuous history
    assert live.filter(attempt=2).exists() and live.filter(attempt=1).exists()
    assert Job.objects.get(run=run, attempt=1).native_state in ("NODE_FAIL", "PENDING+RESTARTED")
