"""An async run logs its observed staleness per token beside the configured bound, under both
answers to a batch that would exceed it: wait (the generator is throttled, nothing is lost) and
drop (the generator runs ahead, the trainer discards and counts)."""

import pytest

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, write_config
from trainer.telemetry.staleness import HIST_PREFIX

SAMPLES_PER_STEP = 16


def _config(on_exceed: str, max_staleness: int) -> dict:
    return {
        "model": {"name": "tiny"},
        "task": {"name": "arithmetic", "eval_sets": []},
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 4},
        "algorithm": {"objective": "m2po", "updates_per_step": 2, "lr": 1e-3},
        "train": {"steps": 6, "seed": 3, "torch_threads": 1},
        "staleness": {"mode": "async", "max_staleness": max_staleness, "on_exceed": on_exceed},
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0, "keep": 1},
    }


@pytest.mark.parametrize("on_exceed,max_staleness", [("wait", 2), ("drop", 1)])
def test_observed_staleness_stays_within_the_bound(tmp_path, on_exceed, max_staleness):
    cfg = write_config(tmp_path / "run.yaml", _config(on_exceed, max_staleness))
    result = run_trainer(cfg, tmp_path / "run")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = by_step(read_points(tmp_path / "run"))
    assert len(rows) == 6
    for m in rows.values():
        assert m["rollout/staleness_bound"] == max_staleness
        hist = {int(k[len(HIST_PREFIX) :]): v for k, v in m.items() if k.startswith(HIST_PREFIX)}
        assert sum(hist.values()) == pytest.approx(1.0)
        assert max(hist) == m["rollout/observed_staleness_max"] <= max_staleness
        # counting to the step's start, the last of its two updates one further
        assert m["rollout/observed_staleness_max"] == m["rollout/staleness_max"] + 1
        dropped = m["rollout/dropped_samples"]
        assert m["rollout/dropped_frac"] == pytest.approx(dropped / (dropped + SAMPLES_PER_STEP))
    dropped = sum(m["rollout/dropped_samples"] for m in rows.values())
    if on_exceed == "wait":
        assert dropped == 0  # throttled instead
    else:
        # a bound of 1 at two updates a step: only a batch from the trainer's newest weights fits, and
        # the batch the generator made ahead of it never does
        assert dropped > 0 and dropped % 4 == 0
