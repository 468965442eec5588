"""A run checkpointed on 2 training processes resumes on 3, then on 1: the CLI as a job
runs it (trainer.launch/torchrun with gloo on CPU for several ranks, `python -m trainer` for one).

Right after each resume the run is stopped (SIGUSR1, the cluster's stop) before it trains, so the
checkpoint it writes then holds exactly the state it loaded: written by the new world size, it
must equal the one the old world size wrote, weight for weight and Adam moment for moment, and its
stale queue must be the same batch re-dealt. The metrics go on as one series of update numbers."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from tests.integration.trainer.cli_helpers import REPO, read_points, trainer_env
from trainer.ckpt import checkpoint as ckpt
from trainer.ckpt.reshard import join_batches
from trainer.launch import children
from trainer.rollout.batch import Batch

pytestmark = pytest.mark.ranks

CONFIG = {
    "model": {"name": "tiny", "tiny_hidden_size": 32},
    "task": {"name": "arithmetic", "eval_sets": []},
    "rollout": {"group_size": 2, "prompts_per_step": 6, "max_new_tokens": 4},  # 6 prompts: 1, 2 and 3 ranks
    "algorithm": {"updates_per_step": 1, "lr": 1e-2},
    "staleness": {"mode": "stale_k", "k": 1},  # a queued batch in every checkpoint, to reshard
    "train": {"steps": 2, "seed": 3, "torch_threads": 1, "device": "cpu"},
    "eval": {"every": 0, "at_start": False},
    "checkpoint": {"every": 1, "keep": 5},
}
SIGUSR1_BIT = 1 << (signal.SIGUSR1 - 1)


def _start(tmp_path: Path, world: int, steps: int, resume: bool, background: bool = False) -> subprocess.Popen:
    config = tmp_path / f"run-{world}-{steps}.yaml"
    checkpoint = {**CONFIG["checkpoint"], "background": background}
    config.write_text(
        yaml.safe_dump({**CONFIG, "train": {**CONFIG["train"], "steps": steps}, "checkpoint": checkpoint})
    )
    args = ["run", "--config", str(config), "--run-dir", str(tmp_path / "run")] + (["--resume"] if resume else [])
    launch = ["-m", "trainer.launch", "--nproc-per-node", str(world), "--"] if world > 1 else ["-m", "trainer"]
    return subprocess.Popen(
        [sys.executable, *launch, *args],
        cwd=REPO,
        env=trainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen, code: int) -> str:
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, out[-5000:]
    return out


def _catches_sigusr1(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & SIGUSR1_BIT)


def _stop_as_soon_as_it_listens(proc: subprocess.Popen, world: int) -> None:
    """SIGUSR1 to every rank once each has its handler: long before the first step (the model and
    the checkpoint still load), so the stop comes at the resumed update, before any training."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ranks = children(proc.pid) if world > 1 else [proc.pid]
        if len(ranks) == world and all(_catches_sigusr1(pid) for pid in ranks):
            for pid in ranks:
                os.kill(pid, signal.SIGUSR1)
            return
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        time.sleep(0.02)
    raise AssertionError("the ranks never installed their stop handler")


def _saved(folder: Path) -> tuple[dict, list[Batch]]:
    """Every weight and optimizer tensor (by name), and the queue's batches joined across ranks."""
    weights = ckpt.load_weights(folder)
    flat = {f"model.{k}": v for k, v in weights["model"].items()}
    for name, state in weights["optimizer"]["state"].items():
        flat.update({f"optim.{name}.{k}": v for k, v in state.items() if torch.is_tensor(v)})
    ranks = len(list(folder.glob("queue-rank*.pt")))
    queues = [[Batch.from_state(b) for b in ckpt.load_rank_queue(folder, r)] for r in range(ranks)]
    return flat, [join_batches(list(parts)) for parts in zip(*queues)]


def _assert_same_state(before: Path, after: Path) -> None:
    (w0, q0), (w1, q1) = _saved(before), _saved(after)
    assert sorted(w0) == sorted(w1)
    assert all(torch.equal(w0[k], w1[k]) for k in w0), [k for k in w0 if not torch.equal(w0[k], w1[k])]
    assert len(q0) == len(q1) == 1
    for a, b in zip(q0, q1):
        for name, value in a.to_state().items():
            other = getattr(b, name)
            assert torch.equal(value, other) if torch.is_tensor(value) else value == other, name


def _resume_and_stop(tmp_path: Path, world: int, step: int) -> str:
    """Resume on `world` processes, stop before training; the rewritten checkpoint equals the old."""
    before = tmp_path / f"before-{world}"
    shutil.copytree(ckpt.latest_checkpoint(tmp_path / "run"), before)
    proc = _start(tmp_path, world, 10, resume=True)
    _stop_as_soon_as_it_listens(proc, world)
    out = _finish(proc, 75)
    assert f"stopping for requeue at update {step}:" in out, out[-3000:]
    latest = ckpt.latest_checkpoint(tmp_path / "run")
    assert ckpt.checkpoint_step(latest) == step
    assert len(list((latest / ckpt.SHARDED_DIR).glob("*.distcp"))) == world  # written by the new world
    assert {p.name for p in latest.glob("queue-rank*.pt")} == {f"queue-rank{r}.pt" for r in range(world)}
    _assert_same_state(before, latest)
    return out


def test_a_run_saved_on_2_ranks_resumes_on_3_then_on_1_with_the_saved_weights_and_one_metric_line(tmp_path):
    _finish(_start(tmp_path, 2, 2, resume=False), 0)
    assert len(list((ckpt.latest_checkpoint(tmp_path / "run") / ckpt.SHARDED_DIR).glob("*.distcp"))) == 2

    out = _resume_and_stop(tmp_path, 3, step=2)
    assert "resharded from 2 to 3 processes" in out
    # updates 3 and 4 train on 3 ranks, the shards written in the background: update 3's checkpoint
    # commits at the end of update 4's step, update 4's before the run ends
    out = _finish(_start(tmp_path, 3, 4, resume=True, background=True), 0)
    assert "resumed at update 2" in out
    assert [ckpt.checkpoint_step(c) for c in ckpt.list_checkpoints(tmp_path / "run")] == [1, 2, 3, 4]

    out = _resume_and_stop(tmp_path, 1, step=4)
    assert "resharded from 3 to 1 processes" in out
    _finish(_start(tmp_path, 1, 5, resume=True), 0)  # update 5 trains on 1

    points = read_points(tmp_path / "run")
    updates = [p["step"] for p in points if p["key"] == "actor/pg_loss"]
    assert updates == [1, 2, 3, 4, 5], updates  # one series: no gap, no update twice
    sizes = sorted(p["step"] for p in points if p["key"] == "checkpoint/bytes")
    assert sizes == [1, 2, 3, 4, 5], sizes  # each checkpoint's size logged once, at its update
