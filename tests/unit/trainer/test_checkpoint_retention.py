"""Checkpoint clean-up: the newest N, the best by a chosen metric, and every pinned step stay;
pins written by the dashboard survive concurrent writers; the config refuses a metric the trainer
never logs."""

import json
import threading

import pytest

from trainer.ckpt import checkpoint as ckpt
from trainer.config import ConfigError, parse_config


def _write(run_dir, step, policy, metrics=None):
    stage = ckpt.prepare_stage(run_dir, step)
    ckpt.write_rank_queue(stage, 0, [])
    return ckpt.commit(run_dir, stage, step, {"step": step}, policy, metrics)


def _steps(run_dir):
    return [ckpt.checkpoint_step(c) for c in ckpt.list_checkpoints(run_dir)]


def test_retention_keeps_the_newest_the_best_and_the_pinned_and_says_why():
    policy = ckpt.RetentionPolicy(keep=2, best_metric="eval/avg_acc", best_count=1, best_mode="max")
    reasons = ckpt.retention(
        [2, 4, 6, 8, 10], policy, {2: 0.1, 4: 0.9, 6: 0.3, 8: 0.2, 10: float("nan")}, {6: ["run 12"]}
    )
    assert reasons == {
        2: [],
        4: ["best eval/avg_acc (0.9, max)"],
        6: ["pinned by run 12"],
        8: ["newest 2"],
        10: ["newest 2"],
    }


def test_min_mode_picks_the_lowest_and_ties_go_to_the_newer():
    policy = ckpt.RetentionPolicy(keep=1, best_metric="actor/pg_loss", best_count=1, best_mode="min")
    reasons = ckpt.retention([1, 2, 3, 4], policy, {1: 0.5, 2: 0.2, 3: 0.2, 4: 0.7})
    assert [s for s, r in reasons.items() if r] == [3, 4]
    assert reasons[3] == ["best actor/pg_loss (0.2, min)"]


def test_commit_prunes_by_metric_from_meta_json_and_spares_pinned_steps(tmp_path):
    policy = ckpt.RetentionPolicy(keep=1, best_metric="train/reward_mean", best_count=1, best_mode="max")
    ckpt.add_pin(tmp_path, 2, "run 7")
    rewards = {1: 0.2, 2: 0.1, 3: 0.8, 4: 0.3, 5: 0.4}
    for step, reward in rewards.items():
        _write(tmp_path, step, policy, {"train/reward_mean": reward, "actor/lr": 1e-6})
    assert _steps(tmp_path) == [2, 3, 5]  # pinned, best (0.8), newest
    meta = ckpt.read_meta(ckpt.list_checkpoints(tmp_path)[1])
    assert meta == {"step": 3, "metrics": {"actor/lr": 1e-6, "train/reward_mean": 0.8}}


def test_a_step_pinned_before_it_exists_survives_when_written(tmp_path):
    policy = ckpt.RetentionPolicy(keep=1)
    ckpt.add_pin(tmp_path, 4, "run 9")
    for step in (2, 4, 6, 8):
        _write(tmp_path, step, policy)
    assert _steps(tmp_path) == [4, 8]


def test_an_unreadable_pins_file_keeps_everything(tmp_path):
    for step in (1, 2):
        _write(tmp_path, step, ckpt.RetentionPolicy(keep=5))
    (tmp_path / ckpt.PINS).write_text("{not json")
    _write(tmp_path, 3, ckpt.RetentionPolicy(keep=1))
    assert _steps(tmp_path) == [1, 2, 3]


def test_concurrent_pins_are_all_recorded_once(tmp_path):
    holders = [f"run {i}" for i in range(20)]
    threads = [threading.Thread(target=ckpt.add_pin, args=(tmp_path, i % 3, h)) for i, h in enumerate(holders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ckpt.add_pin(tmp_path, 0, "run 0")  # again: idempotent
    pins = json.loads((tmp_path / ckpt.PINS).read_text())["pins"]
    assert sorted(p["holder"] for p in pins) == sorted(holders)
    assert ckpt.read_pins(tmp_path)[0].count("run 0") == 1


def test_scheduled_checkpoint_steps_follow_the_loop():
    # every=5 updates, 2 updates per step, 8 steps: step ends at 2,4,...,16
    assert ckpt.checkpoint_steps(16, 2, 5) == [2, 6, 10, 16]
    assert ckpt.checkpoint_steps(3, 1, 1) == [1, 2, 3]
    assert ckpt.checkpoint_steps(8, 2, 0) == [8]  # every 0: only at the end


def test_policy_from_config_takes_the_metrics_own_direction():
    with pytest.raises(ConfigError) as exc:  # entropy has no better side: the user must say
        parse_config({"checkpoint": {"keep_best_metric": "actor/entropy"}})
    assert exc.value.problems[0][0] == "checkpoint.keep_best_mode"
    cfg = parse_config({"checkpoint": {"keep_best_metric": "actor/entropy", "keep_best_mode": "min"}})
    assert ckpt.RetentionPolicy.from_config(cfg.checkpoint).best_mode == "min"
    cfg = parse_config({"checkpoint": {"keep_best_metric": "eval/avg_acc", "keep_best": 2}})
    assert ckpt.RetentionPolicy.from_config(cfg.checkpoint) == ckpt.RetentionPolicy(
        keep=2, best_metric="eval/avg_acc", best_count=2, best_mode="max"
    )


def test_an_unknown_metric_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as exc:
        parse_config({"checkpoint": {"keep_best_metric": "eval/avg_ac"}})
    field, reason = exc.value.problems[0]
    assert field == "checkpoint.keep_best_metric" and "eval/avg_acc" in reason


def test_pins_can_be_taken_back(tmp_path):
    ckpt.add_pins(tmp_path, [(2, "run 1"), (2, "run 2"), (4, "run 1")])
    ckpt.remove_pins(tmp_path, [(2, "run 1"), (4, "run 1")])
    assert ckpt.read_pins(tmp_path) == {2: ["run 2"]}
