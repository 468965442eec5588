"""stale_k delivers exactly the configured staleness; async never exceeds max_staleness.

Staleness is one number (docs/GUIDE.md, "Steps, updates and staleness"): the updates between the weights
that generated a batch and the weights its training step starts from, so a stale_k run with k = 3
at 2 updates per step logs 6 (the name's s6), not 6-7."""

import torch

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, write_config
from trainer.ckpt import checkpoint as ckpt


def _config(**sections):
    base = {
        "model": {"name": "tiny"},
        "task": {"name": "arithmetic", "eval_sets": []},
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 4},
        "algorithm": {"objective": "m2po", "updates_per_step": 2, "lr": 1e-3},
        "train": {"steps": 8, "seed": 3, "torch_threads": 1},
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0, "keep": 1},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return base


def test_stale_k_trains_on_batches_exactly_k_steps_old(tmp_path):
    k, U, steps = 3, 2, 8
    cfg = write_config(tmp_path / "run.yaml", _config(staleness={"mode": "stale_k", "k": k}))
    result = run_trainer(cfg, tmp_path / "run")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = by_step(read_points(tmp_path / "run"))
    assert sorted(rows) == [U * (j + 1) for j in range(steps)]
    for j in range(steps):  # training step j pops the batch of generation step j
        m = rows[U * (j + 1)]
        expected = min(j, k) * U  # base-policy batches during the ramp, then exactly k * U
        assert (m["rollout/staleness_min"], m["rollout/staleness_max"]) == (expected, expected)
    # the queue left behind holds the last k batches, each tagged with the version that made it
    queue = ckpt.load_rank_queue(ckpt.latest_checkpoint(tmp_path / "run"), 0)
    versions = [torch.unique(b["versions"]).tolist() for b in queue]
    assert versions == [[(i - k) * U] for i in range(steps, steps + k)]


def test_async_never_exceeds_max_staleness(tmp_path):
    max_staleness = 3
    cfg = write_config(
        tmp_path / "run.yaml",
        _config(
            staleness={"mode": "async", "max_staleness": max_staleness, "sync_every": 1},
            train={"steps": 12, "seed": 3, "torch_threads": 1},
        ),
    )
    result = run_trainer(cfg, tmp_path / "run")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = by_step(read_points(tmp_path / "run"))
    assert len(rows) == 12
    assert max(m["rollout/staleness_max"] for m in rows.values()) <= max_staleness
    assert all(m["rollout/dropped_frac"] == 0 for m in rows.values())
    # the generator really ran ahead: some batches came from older weights than the trainer's
    assert max(m["rollout/staleness_mean"] for m in rows.values()) > 0.5
    stdout = [line for line in result.stdout.splitlines() if line.startswith("[trainer] update ")]
    assert len(stdout) == 12 and all(
        f"staleness {round(m['rollout/staleness_min'])}" in line for line, m in zip(stdout, rows.values())
    )
