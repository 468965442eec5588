"""Warm start and fork: a run starts from another run's checkpoint, weights only or with its
optimizer, through the same `init` section the dashboard fills in."""

import pytest
import torch
from torch.distributed.checkpoint.state_dict import get_state_dict

from trainer.ckpt import checkpoint as ckpt
from trainer.config import ConfigError, parse_config
from trainer.loop import Trainer

BASE = {
    "task": {"eval_sets": []},
    "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 4},
    "algorithm": {"updates_per_step": 1, "lr": 1e-2},
    "train": {"steps": 3, "device": "cpu", "seed": 2},
    "eval": {"every": 0, "at_start": False},
    "checkpoint": {"every": 1, "keep": 5},
}


@pytest.fixture(scope="module")
def parent(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("parent") / "run"
    assert Trainer(parse_config(BASE), run_dir).run() == 0
    return run_dir


def _child(tmp_path, init: dict) -> Trainer:
    trainer = Trainer(parse_config({**BASE, "train": {**BASE["train"], "seed": 9}, "init": init}), tmp_path / "child")
    trainer.setup()
    return trainer


def test_a_fork_starts_from_the_parents_weights_with_a_fresh_optimizer(parent, tmp_path):
    child = _child(tmp_path, {"from_path": str(parent), "from_step": 2})
    try:
        saved = ckpt.load_weights(ckpt.find_init_checkpoint(parent, 2))["model"]
        mine = child.model.state_dict()
        assert all(torch.equal(mine[k], saved[k]) for k in saved)
        assert child.optimizer.state_dict()["state"] == {}  # fresh optimizer
        assert child.version == 0  # a new run: counters start afresh
    finally:
        child.close()


def test_a_warm_start_can_take_the_optimizer_too(parent, tmp_path):
    child = _child(tmp_path, {"from_path": str(parent), "optimizer": True})  # newest checkpoint
    try:
        saved = ckpt.load_weights(ckpt.latest_checkpoint(parent))["optimizer"]  # sharded: keyed by parameter name
        state = get_state_dict(child.model, child.optimizer)[1]["state"]
        assert state and all(torch.equal(state[n]["exp_avg"], saved["state"][n]["exp_avg"]) for n in saved["state"])
    finally:
        child.close()


def test_a_missing_checkpoint_names_the_path_and_the_steps_there(parent, tmp_path):
    with pytest.raises(ConfigError) as exc:
        _child(tmp_path, {"from_path": str(parent), "from_step": 99})
    [(field, reason)] = exc.value.problems
    assert field == "init.from_step" and str(parent) in reason and "it has 1, 2, 3" in reason
    with pytest.raises(ConfigError) as exc:
        _child(tmp_path, {"from_path": str(tmp_path / "nowhere")})
    assert exc.value.problems[0][0] == "init.from_path"


def test_init_options_without_a_source_are_refused_at_parse_time():
    with pytest.raises(ConfigError) as exc:
        parse_config({"init": {"optimizer": True}})
    assert "init.from_run" in dict(exc.value.problems)
