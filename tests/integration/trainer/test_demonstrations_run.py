"""Demonstrations reach the trained batch in stale_k and async mode alike: both make their batches
through one path, so a warm-up may overlap generation with training."""

import pytest

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, write_config
from trainer.config import ConfigError, parse_config

GROUP, DEMOS = 4, 1


@pytest.mark.parametrize(
    "staleness", [{"mode": "stale_k", "k": 0}, {"mode": "async", "max_staleness": 0}], ids=["stale_k", "async"]
)
def test_every_group_trains_on_its_demonstration(tmp_path, staleness):
    config = {
        "model": {"name": "tiny"},
        "task": {"name": "forks", "eval_sets": [], "demonstrations": DEMOS},
        "rollout": {"group_size": GROUP, "prompts_per_step": 2, "max_new_tokens": 13},
        "algorithm": {"updates_per_step": 1},
        "train": {"steps": 2, "seed": 3, "torch_threads": 1},
        "staleness": staleness,
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0, "keep": 1},
    }
    result = run_trainer(write_config(tmp_path / "run.yaml", config), tmp_path / "run")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = by_step(read_points(tmp_path / "run"))
    assert sorted(rows) == [1, 2]
    # a demonstration scores 1 and an untrained policy's own forks answers next to nothing: the
    # batch mean is at least the demonstrations' share
    assert all(m["train/reward_mean"] >= DEMOS / GROUP for m in rows.values())


def test_demonstrations_are_refused_with_partial_rollouts():
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "task": {"name": "forks", "demonstrations": 1},
                "rollout": {"max_new_tokens": 13, "partial": True},
                "staleness": {"mode": "async", "max_staleness": 1},
            }
        )
    assert [f for f, _ in err.value.problems] == ["task.demonstrations"]
