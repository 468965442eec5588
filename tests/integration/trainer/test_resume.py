"""kill -9 then --resume reproduces an uninterrupted stale_k run; SIGTERM checkpoints and exits 75."""

import math
import os
import signal
import time

import pytest

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, start_trainer, write_config
from trainer.ckpt import checkpoint as ckpt

CONFIG = {
    "model": {"name": "tiny"},
    "task": {"name": "arithmetic"},
    "rollout": {"group_size": 4, "prompts_per_step": 8, "max_new_tokens": 4},
    "algorithm": {"objective": "m2po", "updates_per_step": 2, "lr": 1e-3},
    "staleness": {"mode": "stale_k", "k": 2},
    "train": {"steps": 40, "seed": 5, "torch_threads": 1},
    "eval": {"every": 6},
    "checkpoint": {"every": 4, "keep": 2},
}


def _wait_for_checkpoint(run_dir, at_least: int, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        latest = ckpt.latest_checkpoint(run_dir)
        if latest is not None and int(latest.name.split("-")[1]) >= at_least:
            return
        assert proc.poll() is None, "the trainer ended before the checkpoint appeared"
        time.sleep(0.005)
    raise AssertionError("no checkpoint appeared")


def _deterministic(rows):
    return {s: {k: v for k, v in m.items() if not k.startswith(("perf/", "system/"))} for s, m in rows.items()}


def test_kill_9_then_resume_gives_the_same_metrics(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", CONFIG)
    whole = run_trainer(cfg, tmp_path / "whole")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    expected = _deterministic(by_step(read_points(tmp_path / "whole")))

    proc = start_trainer(cfg, tmp_path / "cut")
    _wait_for_checkpoint(tmp_path / "cut", 8, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    resumed = run_trainer(cfg, tmp_path / "cut", resume=True)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resumed at update" in resumed.stdout

    got = _deterministic(by_step(read_points(tmp_path / "cut")))  # by_step refuses duplicates
    assert sorted(got) == sorted(expected)
    for step, metrics in expected.items():
        assert set(got[step]) == set(metrics), step
        for key, value in metrics.items():
            assert math.isclose(got[step][key], value, rel_tol=1e-4, abs_tol=1e-5), (step, key, got[step][key], value)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_the_stop_signal_checkpoints_and_exits_75(tmp_path, signum):
    cfg = write_config(tmp_path / "run.yaml", {**CONFIG, "train": {"steps": 100000, "seed": 5, "torch_threads": 1}})
    proc = start_trainer(cfg, tmp_path / "run")
    _wait_for_checkpoint(tmp_path / "run", 4, proc)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 75, out
    last_step = max(p["step"] for p in read_points(tmp_path / "run"))
    assert ckpt.latest_checkpoint(tmp_path / "run").name == f"step-{last_step:08d}"


def test_sigterm_to_the_whole_process_group_stops_an_async_run_cleanly(tmp_path):
    """A cluster signals the job's process group: the generator child must not die first."""
    data = {
        **CONFIG,
        "staleness": {"mode": "async", "max_staleness": 4},
        "train": {"steps": 100000, "seed": 5, "torch_threads": 1},
    }
    cfg = write_config(tmp_path / "run.yaml", data)
    proc = start_trainer(cfg, tmp_path / "run", own_group=True)
    _wait_for_checkpoint(tmp_path / "run", 4, proc)
    os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 75, out
