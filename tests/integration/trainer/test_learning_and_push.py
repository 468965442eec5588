"""The CLI learns on the procedural task and pushes every point to a (real, local) dashboard."""

import numpy as np

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, write_config
from tests.unit.trainer.fake_dashboard import Dashboard


def test_reward_rises_on_the_procedural_task_within_a_few_dozen_steps(tmp_path):
    cfg = write_config(
        tmp_path / "run.yaml",
        {
            "model": {"name": "tiny"},
            "task": {"name": "arithmetic", "eval_sets": []},
            "rollout": {"group_size": 8, "prompts_per_step": 16, "max_new_tokens": 4},
            "algorithm": {"objective": "m2po", "lr": 1e-3, "updates_per_step": 2},
            "staleness": {"mode": "stale_k", "k": 1},
            "train": {"steps": 40, "seed": 2, "torch_threads": 1},
            "checkpoint": {"every": 0},
        },
    )
    result = run_trainer(cfg, tmp_path / "run")
    assert result.returncode == 0, result.stdout + result.stderr
    rewards = [m["train/reward_mean"] for _, m in sorted(by_step(read_points(tmp_path / "run")).items())]
    assert len(rewards) == 40
    assert np.mean(rewards[-8:]) > np.mean(rewards[:4]) + 0.15, rewards


def test_every_point_reaches_the_dashboard_with_the_run_token(tmp_path):
    cfg = write_config(
        tmp_path / "run.yaml",
        {
            "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
            "train": {"steps": 3, "torch_threads": 1},
            "eval": {"every": 2},
            "reporting": {"heartbeat_s": 0.2, "push_interval_s": 0.1},
        },
    )
    with Dashboard() as dash:
        result = run_trainer(
            cfg, tmp_path / "run", OPL_DASHBOARD_URL=dash.url, OPL_RUN_ID="42", OPL_RUN_TOKEN="tok-42", OPL_ATTEMPT="1"
        )
    assert result.returncode == 0, result.stdout + result.stderr
    spooled = read_points(tmp_path / "run")
    assert sorted(map(str, dash.accepted_points())) == sorted(map(str, spooled))
    assert {r["auth"] for r in dash.requests} == {"Bearer tok-42"}
    beats = [r["body"] for r in dash.requests if r["path"] == "/api/v1/runs/42/heartbeat"]
    assert beats and beats[-1] == {"attempt": 1, "step": 6, "total_steps": 6}
    assert "tok-42" not in (tmp_path / "run" / "config.resolved.yaml").read_text()
