"""A run says where its time went, in both modes, with numbers that add up."""

import pytest

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, write_config

UTILISATION = (
    "perf/trainer_idle_s",
    "perf/trainer_idle_ratio",
    "perf/gen_idle_s",
    "perf/gen_idle_ratio",
    "perf/wait_weights_s",
    "perf/weight_sync_bytes",
    "perf/train_tokens_per_s",
    "perf/gen_tokens_per_s",
)


def _config(staleness: dict, updates_per_step: int = 1) -> dict:
    return {
        "model": {"name": "tiny"},
        "task": {"name": "arithmetic", "eval_sets": []},
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 6},
        "algorithm": {"objective": "m2po", "updates_per_step": updates_per_step, "lr": 1e-3},
        "train": {"steps": 5, "seed": 7, "torch_threads": 1},
        "staleness": staleness,
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0, "keep": 1},
    }


def _run(tmp_path, name, data):
    result = run_trainer(write_config(tmp_path / f"{name}.yaml", data), tmp_path / name)
    assert result.returncode == 0, result.stdout + result.stderr
    return by_step(read_points(tmp_path / name))


def test_async_reports_idle_time_waits_and_the_weight_hand_over(tmp_path):
    rows = _run(tmp_path, "async", _config({"mode": "async", "max_staleness": 1}, updates_per_step=2))
    assert len(rows) == 5
    for m in rows.values():
        assert set(UTILISATION + ("perf/weight_publish_s", "perf/weight_load_s")) <= set(m)
        assert m["perf/trainer_idle_s"] == m["perf/wait_s"]
        assert 0 <= m["perf/trainer_idle_ratio"] <= 1 and 0 <= m["perf/gen_idle_ratio"] <= 1
        assert 0 <= m["perf/wait_weights_s"] <= m["perf/gen_idle_s"]
        assert m["perf/train_tokens_per_s"] > 0
    # two updates a step, each published: the same whole state twice per step
    sizes = {m["perf/weight_sync_bytes"] for m in rows.values()}
    assert len(sizes) == 1 and sizes.pop() % 2 == 0
    # a bound of 1 with two updates a batch holds the generator back until the next weights come
    assert sum(m["perf/wait_weights_s"] for m in rows.values()) > 0
    assert any(m["perf/gen_tokens_per_s"] > 0 for m in rows.values())


def test_stale_k_idles_one_side_while_the_other_works(tmp_path):
    rows = _run(tmp_path, "stale", _config({"mode": "stale_k", "k": 1}))
    assert len(rows) == 5  # train.steps counts training steps
    for m in rows.values():
        assert set(UTILISATION) <= set(m)
        assert m["perf/trainer_idle_s"] == m["perf/gen_s"]
        assert m["perf/trainer_idle_ratio"] + m["perf/gen_idle_ratio"] == pytest.approx(1.0)
        assert m["perf/weight_sync_bytes"] == 0.0 and m["perf/wait_weights_s"] == 0.0
        assert m["perf/gen_tokens_per_s"] > 0 and m["perf/train_tokens_per_s"] > 0
