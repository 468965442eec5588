"""An async run with partial rollouts trains, logs the version span of its trajectories and the
share continued across a weight update, and keeps the per-token staleness within the bound."""

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, write_config


def test_an_async_run_with_partial_rollouts_logs_version_spans_within_the_bound(tmp_path):
    data = {
        "model": {"name": "tiny"},
        "task": {"name": "arithmetic", "eval_sets": []},
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 24, "partial": True},
        "algorithm": {"objective": "m2po", "updates_per_step": 2, "lr": 1e-3},
        "train": {"steps": 6, "seed": 4, "torch_threads": 1},
        "staleness": {"mode": "async", "max_staleness": 4},
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0, "keep": 1},
    }
    result = run_trainer(write_config(tmp_path / "run.yaml", data), tmp_path / "run")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = by_step(read_points(tmp_path / "run"))
    assert len(rows) == 6
    for m in rows.values():
        assert 0 <= m["rollout/partial_frac"] <= 1
        assert 0 <= m["rollout/version_span_mean"] <= m["rollout/version_span_max"]
        # a trajectory's newest token is no staler than its oldest
        assert m["rollout/version_span_max"] <= m["rollout/observed_staleness_max"] <= m["rollout/staleness_bound"]
        assert m["rollout/dropped_samples"] == 0
        assert m["perf/weight_load_s"] >= 0
