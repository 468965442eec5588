"""Runs that span several training processes: started from a run's `resources` through the job
spec and the local backend, and stopped by a signal that reaches the ranks at different moments.

CPU and gloo stand in for GPUs and NCCL (this machine has no GPU); trainer.launch, torchrun, the
rendezvous, FSDP2, the collective checkpoint and the stop agreement are the real ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
import yaml

from orchestrator.cluster.backends.base import JobState
from orchestrator.cluster.backends.local import LocalBackend
from orchestrator.cluster.jobspec import build_job_spec
from orchestrator.experiments.services import experiment_create
from tests.integration.trainer.cli_helpers import REPO, read_points, trainer_env
from trainer.ckpt import checkpoint as ckpt
from trainer.launch import children

pytestmark = pytest.mark.ranks

TWO_WORKERS = {
    "rollout": {"group_size": 4, "prompts_per_step": 8, "max_new_tokens": 4},
    "algorithm": {"updates_per_step": 2},
    "staleness": {"mode": "stale_k", "k": 1},
    "train": {"steps": 3, "seed": 1, "torch_threads": 1, "device": "cpu"},
    "eval": {"every": 0, "at_start": False},
    "checkpoint": {"every": 4, "keep": 2},
    "resources": {"workers_per_node": 2},
}


def wait_for_state(backend, job_id, states, timeout=300.0):
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        status = backend.statuses([job_id]).get(job_id)
        if status and status.state in states:
            return status
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} never reached {states}: last {status}")


@pytest.mark.django_db
def test_a_run_asking_for_2_workers_trains_on_2_ranks_through_the_local_backend(alice, settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    settings.TRAINER_PYTHON = sys.executable
    settings.PUBLIC_URL = "http://127.0.0.1:9"  # no dashboard: the trainer keeps its spool
    experiment = experiment_create(owner=alice, name="two workers", config=TWO_WORKERS)
    run = experiment.runs.get()
    spec = build_job_spec(run, "token-not-used", tmp_path / "run")
    assert spec.argv[1:3] == ["-m", "trainer.launch"] and "--nproc-per-node" in spec.argv
    assert (spec.nodes, spec.gpus, spec.cpus) == (1, 0, 2)
    backend = LocalBackend(jobs_dir=tmp_path / "jobs")
    status = wait_for_state(backend, backend.submit(spec), {JobState.SUCCEEDED, JobState.FAILED})
    logs = backend.log_paths(spec.run_dir, 1)
    assert status.state is JobState.SUCCEEDED, logs["stdout"].read_text()[-3000:] + logs["stderr"].read_text()[-6000:]
    latest = ckpt.latest_checkpoint(spec.run_dir)
    assert latest.name == "step-00000006"
    assert {p.name for p in latest.glob("queue-rank*.pt")} == {"queue-rank0.pt", "queue-rank1.pt"}  # 2 ranks trained
    counts = Counter((p["step"], p["key"]) for p in read_points(spec.run_dir))
    assert max(counts.values()) == 1 and sorted({s for s, k in counts if k == "actor/pg_loss"}) == [2, 4, 6]


LONG = {**TWO_WORKERS, "train": {**TWO_WORKERS["train"], "steps": 400}, "checkpoint": {"every": 0, "keep": 2}}


def _launch(tmp_path, cfg: dict, resume: bool = False) -> subprocess.Popen:
    config = tmp_path / ("resume.yaml" if resume else "run.yaml")
    config.write_text(yaml.safe_dump(cfg))
    cmd = [
        sys.executable,
        "-m",
        "trainer.launch",
        "--nproc-per-node",
        "2",
        "--",
        "run",
        "--config",
        str(config),
        "--run-dir",
        str(tmp_path / "run"),
    ] + (["--resume"] if resume else [])
    # own session: a failed test kills the launcher and its ranks together (killpg below)
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        env=trainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _kill_all(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_line(proc: subprocess.Popen, needle: str, lines: list[str], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        if needle in line:
            return
    raise AssertionError(f"never saw {needle!r}:\n{''.join(lines)[-4000:]}")


def _ranks(proc: subprocess.Popen) -> list[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = children(proc.pid)
        if len(pids) == 2:
            return pids
        time.sleep(0.2)
    raise AssertionError(f"the launcher has children {children(proc.pid)}, not 2 ranks")


def _rank_of(pid: int) -> int:
    env = f"/proc/{pid}/environ"
    with open(env, "rb") as fh:
        pairs = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
    return int(pairs[b"RANK"])


# (who gets the signal, which, after which line): SIGUSR1 to only rank 1 while rank 0 may still be
# warming up, to only rank 0 in the middle of training, and to the launcher (as Slurm and the local
# supervisor do before a time limit); SIGTERM to the launcher (a cancel or a preemption), which
# torchrun's own handler would turn into killing the ranks and exit 1.
PHASES = [
    ("rank1", signal.SIGUSR1, "fresh start"),
    ("rank0", signal.SIGUSR1, "step 2/"),
    ("launcher", signal.SIGUSR1, "step 3/"),
    ("launcher", signal.SIGTERM, "step 3/"),
]


@pytest.mark.parametrize("target,signum,after", PHASES, ids=[f"{p[0]}-{p[1].name}" for p in PHASES])
def test_a_stop_signal_at_different_phases_checkpoints_exits_75_and_resumes(tmp_path, target, signum, after):
    proc = _launch(tmp_path, LONG)
    lines: list[str] = []
    try:
        _wait_line(proc, after, lines)
        if target == "launcher":
            os.kill(proc.pid, signum)
        else:
            ranks = {_rank_of(pid): pid for pid in _ranks(proc)}
            os.kill(ranks[int(target[-1])], signum)
        out, _ = proc.communicate(timeout=180)  # no hang: both ranks stop together
    finally:
        _kill_all(proc)
    log = "".join(lines) + out
    assert proc.returncode == 75, log[-5000:]
    latest = ckpt.latest_checkpoint(tmp_path / "run")
    assert latest is not None, log[-3000:]
    stopped_at = ckpt.checkpoint_step(latest)
    assert log.count(f"stopping for requeue at update {stopped_at}:") == 2  # both ranks, same update
    assert {p.name for p in latest.glob("queue-rank*.pt")} == {"queue-rank0.pt", "queue-rank1.pt"}
    # each rank wrote its own shards of the weights and optimizer (DCP), state.pt is small
    assert len(list((latest / ckpt.SHARDED_DIR).glob("*.distcp"))) == 2 and "optimizer" not in ckpt.load_state(latest)

    steps = stopped_at // 2 + 2  # two more steps after the resume
    resumed = _launch(tmp_path, {**LONG, "train": {**LONG["train"], "steps": steps}}, resume=True)
    try:
        out, _ = resumed.communicate(timeout=240)
    finally:
        _kill_all(resumed)
    assert resumed.returncode == 0, out[-5000:]
    assert f"resumed at update {stopped_at}" in out
    updates = sorted({p["step"] for p in read_points(tmp_path / "run") if p["key"] == "actor/pg_loss"})
    assert updates[-1] == 2 * steps and len(updates) == len(set(updates))
