"""Mixed precision learns: bf16 and fp16 compute over fp32 master weights, at the paper's lr.

bf16 parameters updated in place by AdamW lose an update of 1e-6 to rounding (a weight of 1e-2 has
a bf16 spacing of ~6e-5), so a run silently stops learning; fp16 without loss scaling overflows.
"""

import pytest
import torch

from trainer.config import parse_config
from trainer.loop import Trainer
from trainer.policy.models import load_policy


def _run(tmp_path, dtype: str, updates: int = 10):
    cfg = parse_config(
        {
            "model": {"dtype": dtype, "tiny_hidden_size": 32},
            "task": {"eval_sets": []},
            "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 6},
            "algorithm": {"objective": "m2po", "lr": 1.0e-6, "updates_per_step": 1},
            "train": {"steps": updates, "device": "cpu", "seed": 5},
            "eval": {"every": 0, "at_start": False},
            "checkpoint": {"every": 0},
        }
    )
    trainer = Trainer(cfg, tmp_path / dtype)
    assert trainer.run() == 0
    initial = load_policy(cfg.model, trainer.alphabet, cfg.train.seed, torch.device("cpu")).model.state_dict()
    final = trainer.model.state_dict()
    changed = sum(int((final[k] != initial[k]).sum()) for k in initial)
    total = sum(v.numel() for v in initial.values())
    finite = all(bool(torch.isfinite(v).all()) for v in final.values())
    return trainer, changed / total, finite


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_ten_updates_at_lr_1e6_move_almost_every_weight(tmp_path, dtype):
    trainer, changed, finite = _run(tmp_path, dtype)
    assert finite
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters()), "master weights must stay fp32"
    assert changed >= 0.9, f"{dtype}: only {changed:.1%} of the weights changed in 10 updates"


def test_float16_uses_loss_scaling_and_never_produces_nan(tmp_path):
    trainer, changed, finite = _run(tmp_path, "float16")
    assert finite
    assert trainer.precision.scaler is not None
    assert changed >= 0.5  # a few updates may be skipped while the scale settles; most must land


def test_float16_is_refused_under_torchrun():
    from trainer.policy.precision import Precision

    with pytest.raises(ValueError, match="model.dtype"):
        Precision("float16", torch.device("cpu"), distributed=True)
