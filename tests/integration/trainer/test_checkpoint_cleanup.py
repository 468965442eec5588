"""Checkpoint clean-up in a real `python -m trainer run`: what survives is the newest, the best by
the chosen metric as the run itself logged it (metrics.jsonl), and a step pinned before the run
started; then a --resume after the run's own clean-up finds its newest checkpoint."""

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, write_config
from trainer.ckpt import checkpoint as ckpt

CONFIG = {
    "model": {"name": "tiny"},
    "task": {"name": "arithmetic", "eval_sets": []},
    "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 4},
    "algorithm": {"objective": "grpo", "updates_per_step": 1, "lr": 1e-2},
    "staleness": {"mode": "stale_k", "k": 0},
    "train": {"steps": 6, "seed": 3, "device": "cpu", "torch_threads": 1},
    "eval": {"every": 0, "at_start": False},
    "checkpoint": {"every": 1, "keep": 1, "keep_best_metric": "train/reward_mean", "keep_best": 1},
}


def _rewards(run_dir) -> dict[int, float]:
    return {s: m["train/reward_mean"] for s, m in by_step(read_points(run_dir)).items() if "train/reward_mean" in m}


def _expected(rewards: dict[int, float], pinned: int) -> list[int]:
    best = max(rewards, key=lambda s: (rewards[s], s))  # ties go to the newer, as retention says
    return sorted({pinned, best, max(rewards)})


def test_the_run_keeps_its_newest_its_best_and_the_pinned_step(tmp_path):
    run_dir = tmp_path / "run"
    ckpt.add_pin(run_dir, 2, "run 99")  # as the dashboard does when a fork of update 2 is created
    done = run_trainer(write_config(tmp_path / "c.yaml", CONFIG), run_dir)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rewards = _rewards(run_dir)
    assert sorted(rewards) == [1, 2, 3, 4, 5, 6]
    kept = [ckpt.checkpoint_step(c) for c in ckpt.list_checkpoints(run_dir)]
    assert kept == _expected(rewards, 2), (rewards, kept)
    for c in ckpt.list_checkpoints(run_dir):  # meta.json holds the very value the run logged
        assert ckpt.read_meta(c)["metrics"]["train/reward_mean"] == rewards[ckpt.checkpoint_step(c)]

    # Two more updates after a resume: the run's own clean-up left it its newest checkpoint.
    more = run_trainer(
        write_config(tmp_path / "c2.yaml", {**CONFIG, "train": {**CONFIG["train"], "steps": 8}}), run_dir, resume=True
    )
    assert more.returncode == 0, more.stdout[-2000:] + more.stderr[-2000:]
    assert "resumed at update 6" in more.stdout
    rewards = _rewards(run_dir)
    kept = [ckpt.checkpoint_step(c) for c in ckpt.list_checkpoints(run_dir)]
    assert kept == _expected(rewards, 2), (rewards, kept)
    # With this seed the best (update 6, reward 0.096) is neither the newest nor the pinned step,
    # so the rule is exercised, not satisfied by "newest" alone.
    assert len(kept) == 3, (rewards, kept)
