"""Checkpoints: renamed into place whole, only the newest kept, RNG states restored."""

import random

import torch

from trainer.ckpt import checkpoint as ckpt


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


def test_a_staged_sharded_checkpoint_is_invisible_until_committed_and_its_shards_count_in_its_size(tmp_path):
    _write(tmp_path, 2)
    stage = ckpt.prepare_stage(tmp_path, 4)  # a background write under way (or killed): shards, no state.pt
    (stage / ckpt.SHARDED_DIR).mkdir()
    (stage / ckpt.SHARDED_DIR / "__0_0.distcp").write_bytes(b"x" * 1000)
    assert ckpt.latest_checkpoint(tmp_path).name == "step-00000002"
    final = ckpt.commit(tmp_path, stage, 4, {"step": 4}, 2)
    assert ckpt.latest_checkpoint(tmp_path) == final
    assert ckpt.folder_bytes(final) > 1000  # the checkpoints card counts dcp/ too


def test_the_next_start_removes_what_a_killed_attempt_staged(tmp_path):
    _write(tmp_path, 2)
    ckpt.prepare_stage(tmp_path, 4)
    assert ckpt.drop_stages(tmp_path) == [".tmp-step-00000004"]
    assert [p.name for p in (tmp_path / ckpt.CKPT_DIR).iterdir()] == ["step-00000002"]
