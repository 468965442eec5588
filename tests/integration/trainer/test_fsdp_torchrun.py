"""Under torchrun the same code trains sharded (FSDP2 over gloo on CPU here), checkpoints and resumes."""

import subprocess
import sys
from collections import Counter

import pytest

from tests.integration.trainer.cli_helpers import REPO, read_points, trainer_env, write_config
from trainer.ckpt import checkpoint as ckpt

pytestmark = pytest.mark.ranks

CONFIG = {
    "rollout": {"group_size": 4, "prompts_per_step": 8, "max_new_tokens": 4},
    "algorithm": {"updates_per_step": 2},
    "staleness": {"mode": "stale_k", "k": 1},
    "train": {"steps": 3, "seed": 1, "torch_threads": 1, "device": "cpu"},
    "eval": {"every": 4},
    "checkpoint": {"every": 4, "keep": 1},
}


def _torchrun(cfg, run_dir, resume=False):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "trainer",
        "run",
        "--config",
        str(cfg),
        "--run-dir",
        str(run_dir),
    ] + (["--resume"] if resume else [])
    return subprocess.run(cmd, cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=300)


def test_two_ranks_train_checkpoint_and_resume(tmp_path):
    run_dir = tmp_path / "run"
    first = _torchrun(write_config(tmp_path / "a.yaml", CONFIG), run_dir)
    assert first.returncode == 0, first.stdout + first.stderr
    latest = ckpt.latest_checkpoint(run_dir)
    assert latest.name == "step-00000006"
    assert (latest / "queue-rank0.pt").is_file() and (latest / "queue-rank1.pt").is_file()  # each rank's stale queue

    longer = {**CONFIG, "train": {**CONFIG["train"], "steps": 4}}
    second = _torchrun(write_config(tmp_path / "b.yaml", longer), run_dir, resume=True)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "resumed at update 6" in second.stdout
    counts = Counter((p["step"], p["key"]) for p in read_points(run_dir))
    assert max(counts.values()) == 1  # rank 0 alone writes metrics, once per step
    assert sorted({s for s, _ in counts}) == [0, 2, 4, 6, 8]
