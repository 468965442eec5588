"""Training runs with `rollout.engine: vllm` on vLLM's CPU build, started as the cluster job starts
them (`python -m trainer run`, here with .venv-vllm's interpreter), read back from metrics.jsonl."""

import json
import subprocess

import pytest
import yaml

from tests.vllm.conftest import REPO, vllm_env

pytestmark = pytest.mark.vllm

BASE = {
    "model": {"name": "tiny"},
    "task": {"name": "arithmetic"},
    "rollout": {
        "engine": "vllm",
        "group_size": 4,
        "prompts_per_step": 4,
        "max_new_tokens": 8,
        "behav_logp": "recompute",
    },
    "algorithm": {"objective": "m2po", "updates_per_step": 2, "lr": 1e-3},
    "train": {"seed": 1, "device": "cpu", "torch_threads": 1},
    "eval": {"every": 0, "at_start": False},
    "checkpoint": {"every": 0, "keep": 1},
}


def run(vllm_python, tmp_path, overrides: dict) -> tuple[subprocess.CompletedProcess, dict[int, dict[str, float]]]:
    cfg = {**BASE, **overrides}
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(cfg))
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [str(vllm_python), "-m", "trainer", "run", "--config", str(config), "--run-dir", str(run_dir)],
        cwd=REPO,
        env=vllm_env(),
        capture_output=True,
        text=True,
        timeout=480,
    )
    steps: dict[int, dict[str, float]] = {}
    metrics = run_dir / "metrics.jsonl"
    for line in metrics.read_text().splitlines() if metrics.is_file() else []:
        p = json.loads(line)
        steps.setdefault(p["step"], {})[p["key"]] = p["value"]
    return done, steps


def trained(steps: dict) -> dict[int, dict[str, float]]:
    return {s: v for s, v in steps.items() if "actor/pg_loss" in v}


def test_stale_k_run_of_20_updates_with_the_vllm_engine(vllm_python, tmp_path):
    done, steps = run(
        vllm_python, tmp_path, {"staleness": {"mode": "stale_k", "k": 1}, "train": {**BASE["train"], "steps": 10}}
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    points = trained(steps)
    assert sorted(points) == list(range(2, 21, 2))  # 10 steps x 2 updates = 20 updates
    for step, v in points.items():
        # The engine sampled from the weights the trainer recomputes with: synced at every step.
        assert abs(v["rollout/engine_kl"]) < 1e-4, (step, v["rollout/engine_kl"])
        assert v["perf/weight_sync_s"] > 0
        # k=1 batch of 2 updates in the queue: s = 2 once the queue has turned over (docs/GUIDE.md: one definition)
        assert (v["rollout/staleness_min"], v["rollout/staleness_max"]) == ((0, 0) if step == 2 else (2, 2))
    assert len({round(v["train/reward_mean"], 6) for v in points.values()}) > 1  # real, varying rollouts


def test_async_run_with_the_vllm_engine_in_the_generator_process(vllm_python, tmp_path):
    done, steps = run(
        vllm_python,
        tmp_path,
        {"staleness": {"mode": "async", "max_staleness": 4}, "train": {**BASE["train"], "steps": 3}},
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    points = trained(steps)
    assert sorted(points) == [2, 4, 6]
    for step, v in points.items():
        assert abs(v["rollout/engine_kl"]) < 1e-4, (step, v["rollout/engine_kl"])
        assert v["rollout/staleness_max"] <= 4
    assert any(v.get("perf/weight_sync_s", 0) > 0 for v in points.values())


def run_two_ranks(vllm_python, tmp_path, cfg: dict) -> tuple[subprocess.CompletedProcess, dict[int, dict[str, float]]]:
    """`python -m trainer.launch` with 2 processes (torchrun; FSDP2 over gloo here), as the job starts it."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(cfg))
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            str(vllm_python),
            "-m",
            "trainer.launch",
            "--nproc-per-node",
            "2",
            "--",
            "run",
            "--config",
            str(config),
            "--run-dir",
            str(run_dir),
        ],
        cwd=REPO,
        env=vllm_env(),
        capture_output=True,
        text=True,
        timeout=480,
    )
    points: dict[int, dict[str, float]] = {}
    metrics = run_dir / "metrics.jsonl"
    for line in metrics.read_text().splitlines() if metrics.is_file() else []:
        p = json.loads(line)
        points.setdefault(p["step"], {})[p["key"]] = p["value"]
    return done, points


def test_two_ranks_each_with_their_own_vllm_engine(vllm_python, tmp_path):
    """Under torchrun (FSDP2 over gloo here) rank 0 writes the engine's folder once, behind a
    barrier, and each rank's engine is synced from the gathered full weights at every step."""
    cfg = {
        **BASE,
        "staleness": {"mode": "stale_k", "k": 1},
        "train": {**BASE["train"], "steps": 3},
        "rollout": {**BASE["rollout"], "prompts_per_step": 8},
        "resources": {"workers_per_node": 2},
    }
    done, points = run_two_ranks(vllm_python, tmp_path, cfg)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    trained_steps = trained(points)
    assert sorted(trained_steps) == [2, 4, 6]
    for step, v in trained_steps.items():
        assert abs(v["rollout/engine_kl"]) < 1e-4, (step, v["rollout/engine_kl"])  # both engines follow the trainer
    latest = sorted((tmp_path / "run" / "ckpt").iterdir())[-1]
    assert {p.name for p in latest.glob("queue-rank*.pt")} == {"queue-rank0.pt", "queue-rank1.pt"}


def test_async_two_ranks_fed_by_rank_0s_vllm_generator(vllm_python, tmp_path):
    """Async under torchrun: rank 0's generator process runs the vLLM engine and every rank trains on
    its share of the same batches, each within max_staleness at every update."""
    max_staleness, U = 3, 2
    cfg = {
        **BASE,
        "staleness": {"mode": "async", "max_staleness": max_staleness, "sync_timeout_s": 400},
        "train": {**BASE["train"], "steps": 4},
        "rollout": {**BASE["rollout"], "prompts_per_step": 8},
        "resources": {"workers_per_node": 2},
    }
    done, points = run_two_ranks(vllm_python, tmp_path, cfg)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    trained_steps = trained(points)
    assert sorted(trained_steps) == [2, 4, 6, 8]
    for step, v in trained_steps.items():
        assert v["rollout/staleness_max"] + U - 1 <= max_staleness, (step, v["rollout/staleness_max"])
        assert v["rollout/dropped_frac"] == 0
        assert abs(v["rollout/engine_kl"]) < 1e-4, (
            step,
            v["rollout/engine_kl"],
        )  # the engine has the published weights
        assert v["train/samples_seen"] == 32 * (step // U)  # both ranks' halves of each 8 x 4 batch
    assert any(v.get("perf/weight_sync_s", 0) > 0 for v in trained_steps.values())
