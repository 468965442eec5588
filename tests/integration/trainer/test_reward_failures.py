"""A reward that cannot be computed stops the run with a clear message instead of training on 0s."""

import json

from tests.integration.trainer.cli_helpers import run_trainer, write_config


def test_a_run_whose_every_reward_fails_stops_and_says_why(tmp_path):
    train = tmp_path / "broken.jsonl"
    # reference answers math-verify cannot parse: every reward of every step is an error
    train.write_text("".join(json.dumps({"problem": f"What is {i}?", "answer": ""}) + "\n" for i in range(4)))
    cfg = write_config(
        tmp_path / "run.yaml",
        {
            "task": {"name": "math", "train_file": str(train), "eval_sets": []},
            "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 4},
            "algorithm": {"updates_per_step": 1},
            "train": {"steps": 3, "device": "cpu"},
            "eval": {"every": 0, "at_start": False},
        },
    )
    result = run_trainer(cfg, tmp_path / "run", timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "run stopped: every reward failed at generation step 0" in result.stderr
    assert "does not parse" in result.stderr
    assert not (tmp_path / "run" / "metrics.jsonl").read_text().count("train/reward_mean")
