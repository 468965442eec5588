"""The trainer on a CUDA GPU, without vLLM: a short bf16 run through the CLI, and the hf engine's
log-probs against the trainer's on the GPU. Marked gpu: `make test` deselects them (no GPU in CI);
scripts/gpu-check.sh runs them on a GPU machine.

OPL_GPU_TEST_DEVICE names the device (scripts/gpu-check.sh sets it: `cuda`, or `cpu` in its dry
run). When it is set, a missing device fails the tests instead of skipping them, so a GPU check
that sees no GPU cannot pass on skips."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

DEVICE = os.environ.get("OPL_GPU_TEST_DEVICE", "")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not DEVICE and not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
REPO = Path(__file__).resolve().parents[2]
# Inside gpu-check.sh's per-test timeout (120 s), itself inside its tests phase: the limits nest.
RUN_TIMEOUT_S = 90


def test_a_bf16_run_trains_on_the_gpu(tmp_path):
    cfg = {
        "model": {"name": "tiny", "dtype": "bfloat16"},
        "rollout": {"group_size": 4, "prompts_per_step": 8, "max_new_tokens": 8},
        "staleness": {"mode": "stale_k", "k": 1},
        "train": {"steps": 4, "device": DEVICE or "cuda", "seed": 1},
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainer",
            "run",
            "--config",
            str(tmp_path / "c.yaml"),
            "--run-dir",
            str(tmp_path / "run"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    points = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [p for p in points if p["key"] == "actor/pg_loss"]
    assert [p["step"] for p in losses] == [2, 4, 6, 8] and all(abs(p["value"]) < 1e3 for p in losses)


def test_hf_engine_log_probs_match_the_trainer_on_the_gpu():
    from trainer.config import ModelConfig
    from trainer.policy.models import load_policy
    from trainer.rollout.batch import HFEngine, token_logprobs

    dev = torch.device(DEVICE or "cuda")
    policy = load_policy(ModelConfig(), "0123456789+=", seed=3, device=dev)
    gen = HFEngine(policy, dev).generate(["1+2=", "17+8="], n=4, max_new_tokens=8, temperature=0.7, top_p=1.0)
    with torch.no_grad():
        lp, _ = token_logprobs(policy.model, gen.input_ids.to(dev), gen.attention_mask.to(dev), gen.prompt_len, 0.7)
    assert torch.allclose(lp.cpu() * gen.response_mask, gen.logp, atol=1e-3)
