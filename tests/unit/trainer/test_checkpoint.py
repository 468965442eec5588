"""Checkpoints: renamed into place whole, only the newest kept, RNG states restored."""

import random

import torch

from trainer import checkpoint as ckpt


def _write(run_dir, step, keep=2):
    stage = ckpt.prepare_stage(run_dir, step)
    ckpt.write_rank_queue(stage, 0, [{"step": step}])
    return ckpt.commit(run_dir, stage, step, {"step": step}, keep)


def test_commit_keeps_the_newest_and_latest_finds_it(tmp_path):
    for step in (2, 4, 6):
        _write(tmp_path, step)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["step-00000004", "step-00000006"]
    latest = ckpt.latest_checkpoint(tmp_path)
    assert ckpt.load_state(latest) == {"step": 6}
    assert ckpt.load_rank_queue(latest, 0) == [{"step": 6}]


def test_a_torn_write_is_never_taken_for_a_checkpoint(tmp_path):
    _write(tmp_path, 2)
    stage = ckpt.prepare_stage(tmp_path, 4)  # killed before commit: state.pt never written, never renamed
    ckpt.write_rank_queue(stage, 0, [])
    assert ckpt.latest_checkpoint(tmp_path).name == "step-00000002"


def test_rng_state_round_trips():
    state = ckpt.rng_state()
    a = (torch.rand(3), random.random())
    ckpt.set_rng_state(state)
    b = (torch.rand(3), random.random())
    assert torch.equal(a[0], b[0]) and a[1] == b[1]
