"""Two ranks (FSDP2 over gloo on CPU) in bf16 with M2PO's minibatch mask: FSDP's
MixedPrecisionPolicy computes in bf16 over float32 master weights, the chunked output head works on
the gathered parameters, and the mask is agreed across ranks and micro-batches."""

import subprocess
import sys

import pytest
import torch

from tests.integration.trainer.cli_helpers import REPO, by_step, read_points, trainer_env, write_config
from trainer.ckpt import checkpoint as ckpt

pytestmark = pytest.mark.ranks


def test_two_ranks_train_in_bf16_over_fp32_master_weights(tmp_path):
    cfg = write_config(
        tmp_path / "run.yaml",
        {
            "model": {"dtype": "bfloat16"},
            "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 6},
            "algorithm": {"objective": "m2po", "tau_m2": 0.001, "updates_per_step": 1, "m2po_scope": "minibatch"},
            "staleness": {"mode": "stale_k", "k": 1},
            "train": {"steps": 3, "seed": 1, "torch_threads": 1, "device": "cpu", "micro_batch_size": 2},
            "eval": {"every": 0, "at_start": False},
            "task": {"eval_sets": []},
            "checkpoint": {"every": 0, "keep": 1},
        },
    )
    run_dir = tmp_path / "run"
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
    ]
    done = subprocess.run(cmd, cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    steps = by_step(read_points(run_dir))
    trained = [m for m in steps.values() if "actor/pg_loss" in m]
    assert len(trained) == 3
    assert all(torch.isfinite(torch.tensor(m["actor/pg_loss"])) for m in trained)
    weights = ckpt.load_weights(ckpt.latest_checkpoint(run_dir))["model"]
    assert all(v.dtype == torch.float32 for v in weights.values() if v.is_floating_point())
