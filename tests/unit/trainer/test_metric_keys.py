"""Every key the trainer logs is in the documented table (trainer/metric_keys.py)."""

import json

import pytest

from trainer.algo.objectives import OBJECTIVES
from trainer.config import parse_config
from trainer.data.benchmarks import benchmarks_dir
from trainer.loop import Trainer
from trainer.metric_keys import METRIC_KEYS, is_known


def _run(tmp_path, **sections):
    data = {
        "model": {"name": "tiny", "tiny_hidden_size": 32},
        "task": {"name": "arithmetic", "eval_max_problems": 4},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
        "algorithm": {"updates_per_step": 2},
        "staleness": {"mode": "stale_k", "k": 1},
        "train": {"steps": 2, "seed": 1, "torch_threads": 1},
        "eval": {"every": 2},
        "checkpoint": {"every": 0},
    }
    for name, values in sections.items():
        data[name] = {**data[name], **values}
    assert Trainer(parse_config(data), tmp_path / "run").run() == 0
    return {json.loads(line)["key"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()}


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_each_objective_logs_only_documented_keys(tmp_path, objective):
    keys = _run(tmp_path, algorithm={"objective": objective, "updates_per_step": 2})
    assert keys and all(is_known(k) for k in keys), sorted(k for k in keys if not is_known(k))
    for required in (
        "train/reward_mean",
        "train/response_len_mean",
        "actor/entropy",
        "actor/grad_norm",
        "perf/tokens_per_s",
        "perf/gen_s",
        "perf/train_s",
        "rollout/staleness_mean",
        "rollout/staleness_min",
        "rollout/staleness_max",
        "eval/arithmetic/acc",
        "eval/avg_acc",
    ):
        assert required in keys


def test_recomputed_behaviour_log_probs_with_tis_log_the_engine_mismatch(tmp_path):
    keys = _run(tmp_path, rollout={"behav_logp": "recompute"}, algorithm={"tis_cap": 2.0, "updates_per_step": 2})
    assert "rollout/engine_kl" in keys and all(is_known(k) for k in keys)


@pytest.mark.skipif(not (benchmarks_dir() / "gsm8k").is_dir(), reason=f"no gsm8k at {benchmarks_dir()}")
def test_math_task_with_math_verify_rewards_and_a_benchmark_eval_set(tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text('{"problem": "What is 2+2?", "answer": "4"}\n{"question": "1+2?", "answer": "#### 3"}\n')
    keys = _run(
        tmp_path,
        task={
            "name": "math",
            "train_file": str(train),
            "eval_sets": ["gsm8k"],
            "eval_max_problems": 2,
            "reward_workers": 1,
        },
        rollout={"max_new_tokens": 8},
    )
    assert {"eval/gsm8k/acc", "eval/avg_acc", "train/reward_mean"} <= keys


def test_an_unlisted_key_is_not_known():
    assert not is_known("actor/made_up") and is_known("eval/aime24/acc")
    assert all(desc for desc in METRIC_KEYS.values())


def test_the_forks_task_logs_its_token_classes(tmp_path):
    """A stale m2po run on forks with a demonstration per group: the per-class stats are logged,
    documented, and consistent (one decision in every 3 response positions, at most)."""
    keys = _run(
        tmp_path,
        task={"name": "forks", "eval_sets": ["forks"], "demonstrations": 1},
        rollout={"max_new_tokens": 13},
        algorithm={"objective": "m2po", "updates_per_step": 2},
    )
    assert all(is_known(k) for k in keys), sorted(k for k in keys if not is_known(k))
    classes = {
        "actor/near_det_frac",
        "actor/decision_frac",
        "actor/m2_decision",
        "actor/m2_format",
        "actor/marked_frac_decision",
        "actor/marked_frac_format",
        "actor/entropy_decision",
        "actor/entropy_format",
    }
    assert classes <= keys and "eval/forks/acc" in keys
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    share = [r["value"] for r in rows if r["key"] == "actor/decision_frac"]
    assert share and all(0 < v <= 1 / 3 for v in share)
