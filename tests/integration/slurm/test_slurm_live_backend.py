"""The slurm backend against real Slurm clusters (22.05 / REST v0.0.38 and 24.11 / v0.0.42).

Each test runs once per cluster; its id names the Slurm version (…[slurm-22.05])."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from orchestrator.cluster.backends.base import BackendError, JobState
from tests.integration.slurm.conftest import PYTHON, REPO
from tests.integration.slurm.livehelpers import (
    metric_steps,
    sleep_spec,
    terminal,
    trainer_spec,
    wait_status,
    wait_until,
)

pytestmark = pytest.mark.slurm
UPDATE_KEY = "actor/pg_loss"  # logged once per optimizer update


def test_trainer_job_goes_pending_running_completed_with_metrics(cluster):
    backend = cluster.backend()
    blocker_id = cluster.new_run_id()
    blocker = backend.submit(sleep_spec(cluster, blocker_id, gpus=4))  # takes every GPU
    wait_status(backend, blocker, lambda s: s.state is JobState.RUNNING)
    spec = trainer_spec(cluster, cluster.new_run_id(), steps=6)
    job = backend.submit(spec)
    seen: list[JobState] = []
    # right after the submit Slurm gives no reason yet; its scheduler adds one shortly
    pending = wait_status(
        backend,
        job,
        lambda s: s.state is not JobState.PENDING or s.reason != "Waiting in the Slurm queue",
        seen=seen,
        timeout=90,
    )
    assert pending.state is JobState.PENDING
    assert pending.reason == "Waiting for resources (CPUs, memory or GPUs) to become free"
    backend.cancel(blocker)
    wait_status(backend, job, lambda s: s.state is not JobState.PENDING, seen=seen)
    metrics_while_running = []
    final = wait_status(
        backend,
        job,
        lambda s: (
            metrics_while_running.append(s.state is JobState.RUNNING and bool(metric_steps(spec.run_dir, UPDATE_KEY)))
            or terminal(s)
        ),
        seen=seen,
    )
    assert seen == [JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED]
    assert any(metrics_while_running), "no metrics appeared while the job was running"
    assert (final.exit_code, final.nodes, final.native_state) == (0, "localhost", "COMPLETED")
    assert final.started_at and final.ended_at and final.ended_at >= final.started_at
    assert metric_steps(spec.run_dir, UPDATE_KEY)[-1] == 12  # 6 steps x 2 updates
    assert "CUDA_VISIBLE_DEVICES" not in backend.log_tail(spec.run_dir, 1)["stderr"]


def test_cancel_running_job_trainer_checkpoints(cluster):
    backend = cluster.backend()
    spec = trainer_spec(cluster, cluster.new_run_id(), steps=500, ckpt_every=1000)
    job = backend.submit(spec)
    # the trainer installs its signal handlers before its first step
    wait_until(lambda: metric_steps(spec.run_dir, UPDATE_KEY), what="the first training step")
    backend.cancel(job)
    final = wait_status(backend, job, terminal)
    assert final.state is JobState.CANCELLED
    out = backend.log_tail(spec.run_dir, 1)["stdout"]
    assert "checkpointing at update" in out and "stopping for requeue" in out
    assert any((spec.run_dir / "ckpt").iterdir()), "no checkpoint written on cancel"


def test_sigusr1_makes_the_trainer_checkpoint_and_exit_75(cluster):
    backend = cluster.backend()
    spec = trainer_spec(cluster, cluster.new_run_id(), steps=500, ckpt_every=1000)
    job = backend.submit(spec)
    wait_until(lambda: metric_steps(spec.run_dir, UPDATE_KEY), what="the first training step")
    backend.signal(job, "SIGUSR1")
    final = wait_status(backend, job, terminal)
    assert (final.state, final.exit_code) == (JobState.FAILED, 75)
    assert "signal 10: checkpointing" in backend.log_tail(spec.run_dir, 1)["stdout"]
    assert any((spec.run_dir / "ckpt").iterdir())


def test_failing_job_ends_failed_with_exit_code_and_log_tail(cluster):
    backend = cluster.backend()
    bad = {"model": {"name": "tiny"}, "task": {"name": "arithmetic"}, "train": {"steps": -3}}
    spec = trainer_spec(cluster, cluster.new_run_id(), config=bad)
    job = backend.submit(spec)
    final = wait_status(backend, job, terminal)
    assert (final.state, final.exit_code, final.native_state) == (JobState.FAILED, 2, "FAILED")
    assert final.reason == "Exited with code 2"
    assert "train.steps" in backend.log_tail(spec.run_dir, 1)["stderr"]


def test_more_gpus_than_exist_is_refused_with_slurms_reason(cluster):
    backend = cluster.backend()
    spec = sleep_spec(cluster, cluster.new_run_id(), gpus=int(cluster.env["SLURM_FAKE_GPUS"]) + 1)
    with pytest.raises(BackendError) as err:
        backend.submit(spec)
    assert err.value.permanent
    assert "Requested node configuration is not available" in str(err.value)
    # Slurm keeps the refused job as FAILED (it used up a job id): a retried submit task
    # would find it and the run would fail with the same reason rather than resubmit
    refused = backend.find(spec.name)
    if refused is not None:
        status = backend.statuses([refused])[refused]
        assert status.state is JobState.FAILED and status.exit_code is None
        assert status.reason.endswith("(its constraints cannot be satisfied)")


def _stop_slurmrestd(cluster) -> None:
    pid_file = cluster.rest_pid_file()
    pid = int(pid_file.read_text())
    with open(f"/proc/{pid}/comm") as f:
        assert f.read().strip() == "slurmrestd"
    os.kill(pid, signal.SIGINT)
    wait_until(lambda: not os.path.exists(f"/proc/{pid}"), timeout=30, what="slurmrestd to exit")


def test_slurmrestd_down_then_back_submits_once(cluster):
    spec = sleep_spec(cluster, cluster.new_run_id(), seconds=1)
    _stop_slurmrestd(cluster)
    try:
        down = cluster.backend(connect_retries=1, backoff_s=0.05)
        with pytest.raises(BackendError) as err:
            down.submit(spec)
        assert not err.value.permanent  # the run stays queued
        assert cluster.env["SLURM_REST_URL"] in str(err.value)
        health = down.health()
        assert health["reachable"] is False and cluster.env["SLURM_REST_URL"] in health["error"]
    finally:
        cluster.up()
    backend = cluster.backend()
    job = backend.submit(spec)
    assert backend.submit(spec) == job  # a retried submit finds it
    assert [j.job_id for j in backend.client.jobs() if j.name == spec.name] == [job]


def test_submit_killed_after_post_then_retried_creates_no_second_job(cluster):
    spec = sleep_spec(cluster, cluster.new_run_id(), seconds=30)
    code = f"""
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {str(REPO)!r})
from orchestrator.cluster.backends.base import JobSpec
from orchestrator.cluster.backends.slurm import SlurmBackend
from orchestrator.cluster.slurm.auth import SlurmCredentials
from orchestrator.cluster.slurm.client import SlurmClient
from orchestrator.cluster.slurm.jobscript import SlurmProfile
client = SlurmClient({cluster.env["SLURM_REST_URL"]!r}, SlurmCredentials({cluster.env["SLURM_REST_USER"]!r},
                     key_file={cluster.env["SLURM_JWT_KEY_FILE"]!r}))
backend = SlurmBackend(client=client, profiles=lambda _n: SlurmProfile(), run_dir_mode=0o1777)
spec = JobSpec(run_id={spec.run_id}, attempt=1, run_dir=Path({str(spec.run_dir)!r}), argv={spec.argv!r}, mem_gb=0.25)
backend.submit(spec)
os.kill(os.getpid(), signal.SIGKILL)  # dies before it can record the job id anywhere
"""
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    backend = cluster.backend()
    retried = backend.submit(spec)
    assert [j.job_id for j in backend.client.jobs() if j.name == spec.name] == [retried]
    backend.cancel(retried)


def test_node_failure_ends_node_fail_and_the_next_attempt_resumes(cluster):
    backend = cluster.backend()
    run_id = cluster.new_run_id()
    first = trainer_spec(cluster, run_id, steps=40, ckpt_every=2)
    job = backend.submit(first)
    wait_until(
        lambda: (
            (first.run_dir / "ckpt").exists()
            and any((first.run_dir / "ckpt").iterdir())
            and len(metric_steps(first.run_dir, UPDATE_KEY)) >= 3
        ),
        timeout=180,
        what="a checkpoint",
    )
    cluster.command("scontrol", "update", "nodename=localhost", "state=down", "reason=opl-node-fail-test")
    try:
        failed = wait_status(backend, job, terminal)
    finally:
        cluster.command("scontrol", "update", "nodename=localhost", "state=resume")
    assert failed.state is JobState.INFRA_FAILED
    if cluster.version.startswith("22.05"):
        # 22.05's REST API cannot turn Slurm's own requeue off: the job goes back to
        # PENDING with a restart count (its script would refuse to train twice)
        assert failed.native_state.endswith("+RESTARTED") and "requeued" in failed.reason
        backend.cancel(job)  # what sync does before resubmitting
    else:
        assert failed.native_state == "NODE_FAIL" and failed.reason.startswith("Its node failed")
    wait_until(
        lambda: all(n.state in ("IDLE", "MIXED", "ALLOCATED") for n in backend.client.nodes()),
        timeout=60,
        what="the node to come back",
    )
    before = metric_steps(first.run_dir, UPDATE_KEY)
    second = trainer_spec(cluster, run_id, attempt=2, steps=40, ckpt_every=2)
    final = wait_status(backend, backend.submit(second), terminal, timeout=300)
    assert (final.state, final.exit_code) == (JobState.SUCCEEDED, 0)
    out = backend.log_tail(second.run_dir, 2, lines=400)["stdout"]
    assert "resumed at update" in out
    resumed_at = int(out.split("resumed at update ")[1].split(";")[0])
    assert resumed_at > 0 and before  # resumed from a checkpoint, not from scratch
    steps = metric_steps(second.run_dir, UPDATE_KEY)
    assert steps == sorted(set(steps)), "metric history has duplicates or goes back"
    assert steps == list(range(2, 81, 2))  # one continuous history: every update of 40 steps once
