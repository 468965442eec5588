"""Helpers for the live Slurm tests: trainer job specs and polling."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import yaml

from orchestrator.cluster.backends.base import JobSpec, JobState, JobStatus
from tests.conftest import TINY_CONFIG
from tests.integration.slurm.conftest import PYTHON, REPO, Cluster

TINY = TINY_CONFIG  # the suite's one tiny run config


def trainer_spec(
    cluster: Cluster,
    run_id: int,
    *,
    attempt: int = 1,
    steps: int = 4,
    ckpt_every: int = 2,
    gpus: int = 1,
    config: dict | None = None,
) -> JobSpec:
    run_dir = cluster.run_dir(run_id)
    cfg = json.loads(json.dumps(config or TINY))
    if config is None:
        cfg["train"]["steps"] = steps
        cfg["checkpoint"]["every"] = ckpt_every
    path = run_dir / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    os.chmod(path, 0o666)
    argv = [PYTHON, "-m", "trainer", "run", "--config", str(path), "--run-dir", str(run_dir)]
    if attempt > 1:
        argv.append("--resume")
    env = {
        "PYTHONPATH": str(REPO),
        "OPL_RUN_ID": str(run_id),
        "OPL_ATTEMPT": str(attempt),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    return JobSpec(
        run_id=run_id,
        attempt=attempt,
        run_dir=run_dir,
        argv=argv,
        env=env,
        gpus=gpus,
        cpus=1,
        mem_gb=1.0,
        time_limit_min=15,
    )


def sleep_spec(cluster: Cluster, run_id: int, seconds: int = 300, gpus: int = 0) -> JobSpec:
    return JobSpec(
        run_id=run_id,
        attempt=1,
        run_dir=cluster.run_dir(run_id),
        argv=["/bin/sleep", str(seconds)],
        gpus=gpus,
        mem_gb=0.25,
    )


def wait_status(backend, job_id: str, until, timeout: float = 180, seen: list | None = None) -> JobStatus:
    """Poll until `until(status)`; records every state seen (in order, no repeats) in `seen`."""
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        status = backend.statuses([job_id]).get(job_id)
        if status is not None:
            if seen is not None and (not seen or seen[-1] != status.state):
                seen.append(status.state)
            if until(status):
                return status
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} never reached the expected state; last: {status}")


def terminal(status: JobStatus) -> bool:
    return status.state.is_terminal


def metric_steps(run_dir: Path, key: str) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        try:
            point = json.loads(line)
        except ValueError:
            continue
        if point.get("key") == key:
            steps.append(point["step"])
    return steps


def wait_until(predicate, timeout: float = 120, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


__all__ = ["JobState", "trainer_spec", "sleep_spec", "wait_status", "terminal", "metric_steps", "wait_until"]
