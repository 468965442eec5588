"""Async mode under torchrun: rank 0's generator feeds both ranks within the staleness bound, and a
generator that stops (SIGSTOP, a real fault) fails the run within the hand-over timeout, naming the
rank and the phase, with no process left behind."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.trainer.cli_helpers import REPO, by_step, read_points, trainer_env, write_config

pytestmark = pytest.mark.ranks

MAX_STALENESS = 3


def _config(steps: int, timeout_s: float = 600) -> dict:
    return {
        "model": {"name": "tiny"},
        "task": {"name": "arithmetic", "eval_sets": []},
        "rollout": {"group_size": 4, "prompts_per_step": 8, "max_new_tokens": 4},
        "algorithm": {"objective": "m2po", "updates_per_step": 2, "lr": 1e-3},
        "staleness": {"mode": "async", "max_staleness": MAX_STALENESS, "sync_every": 1, "sync_timeout_s": timeout_s},
        "train": {"steps": steps, "seed": 3, "torch_threads": 1, "device": "cpu"},
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0, "keep": 1},
        "resources": {"workers_per_node": 2},
    }


def _torchrun_cmd(config: Path, run_dir: Path) -> list[str]:
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    return launch + ["-m", "trainer", "run", "--config", str(config), "--run-dir", str(run_dir)]


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for kid in _children(todo.pop()):
            out.append(kid)
            todo.append(kid)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_two_ranks_train_on_the_generators_batches_within_the_bound(tmp_path):
    steps = 8
    config = write_config(tmp_path / "run.yaml", _config(steps))
    run_dir = tmp_path / "run"
    done = subprocess.run(
        _torchrun_cmd(config, run_dir), cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=400
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    rows = by_step(read_points(run_dir))
    assert sorted(rows) == [2 * (j + 1) for j in range(steps)]  # rank 0 alone logs, once per step
    for step, m in rows.items():
        # the step's last update trains on data at most max_staleness updates old
        assert m["rollout/staleness_max"] + 2 - 1 <= MAX_STALENESS, (step, m["rollout/staleness_max"])
        assert m["rollout/dropped_frac"] == 0
        assert m["train/samples_seen"] == 32 * (step // 2)  # both ranks' halves of each 8 x 4 batch
    assert max(m["rollout/staleness_mean"] for m in rows.values()) > 0.5  # the generator really ran ahead


def test_a_stopped_generator_fails_the_run_within_the_timeout_naming_rank_and_phase(tmp_path):
    timeout_s = 30  # above the generator's start-up on a loaded 2-core machine
    config = write_config(tmp_path / "run.yaml", _config(steps=200, timeout_s=timeout_s))
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        _torchrun_cmd(config, run_dir),
        cwd=REPO,
        env=trainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    family: set[int] = set()
    try:
        metrics = run_dir / "metrics.jsonl"
        deadline = time.monotonic() + 240
        while not (metrics.is_file() and metrics.stat().st_size > 0):  # training has begun
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the run ended or never trained:\n{proc.communicate()[0][-6000:]}")
            time.sleep(0.5)
        family = set(_descendants(proc.pid))
        generators = [p for p in family if "multiprocessing.spawn" in _cmdline(p) or "spawn_main" in _cmdline(p)]
        assert len(generators) == 1, [(p, _cmdline(p)) for p in family]
        os.kill(generators[0], signal.SIGSTOP)
        stopped_at = time.monotonic()
        output, _ = proc.communicate(timeout=timeout_s + 120)
        failed_after = time.monotonic() - stopped_at
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    print(f"failed {failed_after:.1f} s after SIGSTOP (timeout {timeout_s} s)")
    assert proc.returncode != 0, output[-4000:]
    assert "rank 0: the generator did not load weights version" in output, output[-6000:]
    assert f"within {timeout_s} s (phase: weight load)" in output, output[-6000:]
    time.sleep(1)
    assert [p for p in family if _alive(p)] == [], "processes left behind"
