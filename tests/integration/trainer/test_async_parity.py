"""Async at max_staleness 0 is sync: the generator may start a batch only from the trainer's
newest weights and only once the trainer took the previous one, so at the same seed it trains
exactly as stale_k at k 0, metric for metric (all but the clocks)."""

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, write_config

ASYNC_ONLY = {"rollout/dropped_frac", "rollout/dropped_samples", "rollout/staleness_bound"}
# the final checkpoint's size: stale_k's holds its (empty) batch queue, async's does not
NOT_TRAINING = {"checkpoint/bytes"}


def _config(staleness: dict) -> dict:
    return {
        "model": {"name": "tiny"},
        "task": {"name": "arithmetic", "eval_sets": []},
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 6},
        "algorithm": {"objective": "m2po", "updates_per_step": 1, "lr": 0.05},
        "train": {"steps": 6, "seed": 11, "torch_threads": 1},
        "staleness": staleness,
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0, "keep": 1},
    }


def _run(tmp_path, name: str, staleness: dict) -> dict[int, dict[str, float]]:
    result = run_trainer(write_config(tmp_path / f"{name}.yaml", _config(staleness)), tmp_path / name)
    assert result.returncode == 0, result.stdout + result.stderr
    return by_step(read_points(tmp_path / name))


def _model_metrics(rows: dict[int, dict[str, float]]) -> dict[int, dict[str, float]]:
    """Everything but the clocks (perf/*, system/*) and the checkpoint's size."""
    return {
        step: {
            k: v for k, v in m.items() if not k.startswith(("perf/", "system/")) and k not in ASYNC_ONLY | NOT_TRAINING
        }
        for step, m in rows.items()
    }


def test_async_at_max_staleness_0_trains_exactly_as_stale_k_at_k_0(tmp_path):
    sync = _run(tmp_path, "stale_k", {"mode": "stale_k", "k": 0})
    overlapped = _run(tmp_path, "async", {"mode": "async", "max_staleness": 0})
    assert sorted(sync) == sorted(overlapped) == list(range(1, 7))
    assert all(m["rollout/staleness_bound"] == 0 and m["rollout/dropped_samples"] == 0 for m in overlapped.values())
    assert _model_metrics(overlapped) == _model_metrics(sync)
    # not vacuous: the batches differ from step to step and the policy moved, so a differing batch would show
    assert len({m["train/response_len_mean"] for m in sync.values()}) > 1
    assert any(m["actor/pg_loss"] != 0 for m in sync.values())
