"""`python -m trainer.ckpt.export_hf CKPT OUT` writes a checkpoint's weights as a Hugging Face folder that
transformers loads as it is, with every weight equal to the saved one: from a sharded checkpoint
(the default) and from a gathered weights.pt (the format before)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.integration.trainer.cli_helpers import REPO, trainer_env
from trainer.ckpt import checkpoint as ckpt
from trainer.config import parse_config
from trainer.loop import Trainer

CONFIG = {
    "model": {"name": "tiny", "tiny_hidden_size": 32},
    "task": {"eval_sets": []},
    "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
    "algorithm": {"updates_per_step": 1, "lr": 1e-2},
    "staleness": {"k": 0},
    "train": {"steps": 1, "torch_threads": 1, "device": "cpu"},
    "eval": {"every": 0, "at_start": False},
}


@pytest.mark.parametrize("fmt", ["sharded", "gathered"])
def test_export_hf_writes_a_folder_transformers_loads_with_the_saved_weights(tmp_path, fmt):
    cfg = parse_config({**CONFIG, "checkpoint": {"format": fmt}})
    assert Trainer(cfg, tmp_path / "run").run() == 0
    folder = ckpt.latest_checkpoint(tmp_path / "run")
    done = subprocess.run(
        [sys.executable, "-m", "trainer.ckpt.export_hf", str(folder), str(tmp_path / "hf")],
        cwd=REPO,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    saved = ckpt.load_weights(folder)["model"]
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").state_dict()
    assert set(saved) <= set(exported)
    assert all(torch.equal(exported[k], saved[k]) for k in saved), [
        k for k in saved if not torch.equal(exported[k], saved[k])
    ]


def test_export_hf_refuses_a_folder_that_is_no_checkpoint(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "trainer.ckpt.export_hf", str(tmp_path), str(tmp_path / "hf")],
        cwd=REPO,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "is not a checkpoint folder" in done.stderr
