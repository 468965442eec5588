"""A reward that cannot be computed is counted, warned about, and stops the run when every reward of
a step failed, instead of training on 0s; stale_k and async runs make their batches through the same
path, so they do all three alike."""

import json

import pytest

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, write_config

STALE_K = {"mode": "stale_k", "k": 0}
ASYNC = {"mode": "async", "max_staleness": 0}  # at the same seed, the prompts stale_k at k 0 draws


def _math_config(path, train, staleness: dict, steps: int, prompts: int = 2) -> dict:
    return write_config(
        path,
        {
            "task": {"name": "math", "train_file": str(train), "eval_sets": []},
            "rollout": {"group_size": 2, "prompts_per_step": prompts, "max_new_tokens": 4},
            "algorithm": {"updates_per_step": 1},
            "train": {"steps": steps, "device": "cpu", "seed": 5, "torch_threads": 1},
            "staleness": staleness,
            "eval": {"every": 0, "at_start": False},
            "checkpoint": {"every": 0, "keep": 1},
        },
    )


@pytest.mark.parametrize("staleness", [STALE_K, ASYNC], ids=["stale_k", "async"])
def test_a_run_whose_every_reward_fails_stops_and_says_why(tmp_path, staleness):
    train = tmp_path / "broken.jsonl"
    # reference answers math-verify cannot parse: every reward of every step is an error
    train.write_text("".join(json.dumps({"problem": f"What is {i}?", "answer": ""}) + "\n" for i in range(4)))
    cfg = _math_config(tmp_path / "run.yaml", train, staleness, steps=3)
    result = run_trainer(cfg, tmp_path / "run", timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "run stopped: every reward failed at generation step 0" in result.stderr
    assert "does not parse" in result.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").read_text().count("train/reward_mean")


def _reward_failures(tmp_path, name: str, train, staleness: dict) -> tuple[dict[int, tuple[float, float]], str]:
    """Per trained step, (reward/errors, reward/timeouts); and the run's stderr."""
    cfg = _math_config(tmp_path / f"{name}.yaml", train, staleness, steps=4, prompts=4)
    result = run_trainer(cfg, tmp_path / name, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = by_step(read_points(tmp_path / name))
    return {step: (m["reward/errors"], m["reward/timeouts"]) for step, m in rows.items()}, result.stderr


def test_stale_k_and_async_count_a_failing_reward_the_same_way(tmp_path):
    train = tmp_path / "half_broken.jsonl"
    # one reference answer math-verify cannot parse: each sample of that problem is a reward error
    lines = [{"problem": "What is 1+1?", "answer": "2"}, {"problem": "What is 2+2?", "answer": ""}]
    train.write_text("".join(json.dumps(row) + "\n" for row in lines))
    sync, sync_log = _reward_failures(tmp_path, "stale_k", train, STALE_K)
    overlapped, async_log = _reward_failures(tmp_path, "async", train, ASYNC)
    assert sorted(sync) == sorted(overlapped) == [1, 2, 3, 4]
    assert overlapped == sync
    # not vacuous: failures were counted (whole groups of 2), and no step was all failures (that stops a run)
    errors = [e for e, _ in sync.values()]
    assert sum(errors) > 0 and all(e % 2 == 0 and e < 8 for e in errors)
    for log in (sync_log, async_log):  # both warned, naming the failure
        assert "reward errors and 0 timeouts out of 8; first: reference answer '' does not parse" in log
