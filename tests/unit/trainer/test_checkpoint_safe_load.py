"""Checkpoints load with torch.load(weights_only=True): a crafted pickle under a path a
job may read runs no code; everything a resume needs is tensors and plain types; a state.pt of
the old format (numpy arrays in its RNG state) is converted once and the run resumes exactly."""

import os
import pickle
import random

import numpy as np
import pytest
import torch

from trainer.ckpt import checkpoint as ckpt
from trainer.config import ConfigError, parse_config
from trainer.loop import Trainer

BASE = {
    "model": {"name": "tiny", "tiny_hidden_size": 32},
    "task": {"eval_sets": []},
    "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
    "algorithm": {"updates_per_step": 1, "lr": 1e-2},
    "staleness": {"k": 1},
    "train": {"steps": 1, "torch_threads": 1, "device": "cpu"},
    "eval": {"every": 0, "at_start": False},
    "checkpoint": {"every": 1, "keep": 5},
}


class Payload:
    """Pickles as a call of os.mkdir: loading it with weights_only=False runs it."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _old_format(state_file):
    """Rewrite a state.pt as the trainer wrote it before: numpy's RNG state as its legacy tuple."""
    state = torch.load(state_file, weights_only=True)
    for rank in state["rng"]:
        rank["numpy"] = np.random.get_state()  # ('MT19937', uint32 array, pos, has_gauss, gauss)
    torch.save(state, state_file)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(state_file, weights_only=True)  # really the old format: numpy arrays
    return state


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A 2-step run, and the same run stopped after step 1 (checkpoint at update 1)."""
    root = tmp_path_factory.mktemp("runs")
    straight = Trainer(parse_config({**BASE, "train": {**BASE["train"], "steps": 2}}), root / "straight")
    assert straight.run() == 0
    assert Trainer(parse_config(BASE), root / "stopped").run() == 0
    return straight, root / "stopped"


def test_every_file_of_a_checkpoint_loads_with_weights_only(runs):
    _, stopped = runs
    folder = ckpt.latest_checkpoint(stopped)
    assert {p.name for p in folder.glob("*.pt")} == {"state.pt", "queue-rank0.pt"}  # the weights are in dcp/
    for file in folder.glob("*.pt"):
        torch.load(file, weights_only=True)
    state = ckpt.load_state(folder)
    assert isinstance(state["rng"][0]["numpy"]["key"], torch.Tensor)


def test_an_old_format_checkpoint_is_converted_once_and_resumes_exactly(runs):
    straight, stopped = runs
    folder = ckpt.latest_checkpoint(stopped)
    old = _old_format(folder / "state.pt")
    resumed = Trainer(parse_config({**BASE, "train": {**BASE["train"], "steps": 2}}), stopped, resume=True)
    assert resumed.run() == 0
    converted = torch.load(folder / "state.pt", weights_only=True)  # rewritten: plain from now on
    np.random.set_state(old["rng"][0]["numpy"])
    expected = np.random.random(5)
    ckpt.set_rng_state(converted["rng"][0])
    assert np.array_equal(np.random.random(5), expected)
    mine, theirs = resumed.model.state_dict(), straight.model.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)  # the same weights as the run never stopped


def test_an_old_checkpoint_that_cannot_be_rewritten_is_converted_in_memory(tmp_path):
    folder = tmp_path / "ckpt" / "step-00000001"
    folder.mkdir(parents=True)
    random.seed(3)
    torch.save(
        {
            "rng": [{"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}],
            "version": 1,
        },
        folder / "state.pt",
    )
    before = (folder / "state.pt").read_bytes()
    (folder / f".state.pt.tmp{os.getpid()}").mkdir()  # where the rewrite goes: it cannot (root ignores chmod)
    state = ckpt.load_state(folder)
    assert state["version"] == 1 and isinstance(state["rng"][0]["numpy"]["key"], torch.Tensor)
    assert (folder / "state.pt").read_bytes() == before


@pytest.mark.parametrize("name", ["state.pt", "weights.pt", "queue-rank0.pt"])
def test_a_crafted_pickle_runs_no_code(tmp_path, name):
    folder = tmp_path / "ckpt" / "step-00000001"
    folder.mkdir(parents=True)
    for file in ("state.pt", "weights.pt", "queue-rank0.pt"):
        torch.save({"version": 1} if file != name else {"rng": [], "evil": Payload(tmp_path / "pwned")}, folder / file)
    with pytest.raises(ckpt.CheckpointError, match="not a checkpoint this trainer reads safely"):
        {
            "state.pt": ckpt.load_state,
            "weights.pt": ckpt.load_weights,
            "queue-rank0.pt": lambda f: ckpt.load_rank_queue(f, 0),
        }[name](folder)
    assert not (tmp_path / "pwned").exists()


def test_a_fork_from_a_crafted_checkpoint_is_refused_naming_the_field(tmp_path):
    folder = tmp_path / "evil" / "ckpt" / "step-00000001"
    folder.mkdir(parents=True)
    torch.save({"config": {"model": {"name": "tiny"}}, "evil": Payload(tmp_path / "pwned")}, folder / "state.pt")
    trainer = Trainer(parse_config({**BASE, "init": {"from_path": str(folder)}}), tmp_path / "child")
    with pytest.raises(ConfigError) as exc:
        trainer.setup()
    assert exc.value.problems[0][0] == "init.from_path" and "reads safely" in exc.value.problems[0][1]
    assert not (tmp_path / "pwned").exists()


def test_a_gathered_single_file_checkpoint_still_resumes_exactly(runs, tmp_path):
    """The format before sharded checkpoints (weights.pt from rank 0) loads into a run whose
    checkpoints are now sharded, and the run continues as if it had never stopped."""
    straight, _ = runs
    gathered = {**BASE, "checkpoint": {**BASE["checkpoint"], "format": "gathered"}}
    assert Trainer(parse_config(gathered), tmp_path / "old").run() == 0
    folder = ckpt.latest_checkpoint(tmp_path / "old")
    assert (folder / ckpt.WEIGHTS).is_file() and not (folder / ckpt.SHARDED_DIR).exists()
    resumed = Trainer(parse_config({**BASE, "train": {**BASE["train"], "steps": 2}}), tmp_path / "old", resume=True)
    assert resumed.run() == 0
    assert (ckpt.latest_checkpoint(tmp_path / "old") / ckpt.SHARDED_DIR / ".metadata").is_file()
    mine, theirs = resumed.model.state_dict(), straight.model.state_dict()
    assert all(torch.equal(mine[k], theirs[k]) for k in theirs)


def test_a_bad_checkpoint_format_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as refused:
        parse_config({**BASE, "checkpoint": {"format": "zip"}})
    assert "checkpoint.format" in str(refused.value) and "sharded" in str(refused.value)


def test_a_background_write_of_a_gathered_checkpoint_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as refused:
        parse_config({**BASE, "checkpoint": {"format": "gathered", "background": True}})
    assert "checkpoint.background" in str(refused.value) and "format: sharded" in str(refused.value)
