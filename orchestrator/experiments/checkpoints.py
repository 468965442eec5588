"""A run's checkpoints as its page lists them: step, size on disk, and why each is kept.

Read from the run's folder (cluster/jobspec.py `run_dir_for`, the folder a fork's job reads its
parent from), with the same clean-up rule the trainer applies (trainer/ckpt/checkpoint.py
`retention`), so the page says what the trainer will keep and why. A step pinned by a fork but
not written yet is listed too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.experiments.models import Run
from orchestrator.experiments.run_dirs import run_dir_for
from trainer.ckpt import checkpoint_files as ckpt

_HOLDER = re.compile(r"^run (\d+)\Z")
PINNED = "pinned by "


@dataclass
class CheckpointRow:
    step: int
    size_bytes: int | None  # None: pinned, not written yet
    reasons: list[str]
    metric: float | None = None  # the keep_best_metric value at this checkpoint, if any
    pinned_for: list[int] = field(default_factory=list)  # runs forked from it

    @property
    def exists(self) -> bool:
        return self.size_bytes is not None

    @property
    def pinned(self) -> bool:
        return any(r.startswith(PINNED) for r in self.reasons)

    @property
    def only_pinned(self) -> bool:
        """Kept for forks alone: the clean-up would delete it without its pins."""
        return bool(self.reasons) and all(r.startswith(PINNED) for r in self.reasons)


@dataclass
class CheckpointListing:
    folder: Path
    rows: list[CheckpointRow]
    policy: ckpt.RetentionPolicy

    @property
    def total_bytes(self) -> int:
        return sum(r.size_bytes or 0 for r in self.rows)

    @property
    def pinned_bytes(self) -> int:
        """Disk of the written checkpoints that forks pin."""
        return sum(r.size_bytes for r in self.rows if r.exists and r.pinned)

    @property
    def only_pinned_bytes(self) -> int:
        """Of those, the disk held for forks alone (the clean-up rule would have freed it)."""
        return sum(r.size_bytes for r in self.rows if r.exists and r.only_pinned)

    @property
    def pinned_count(self) -> int:
        return sum(1 for r in self.rows if r.exists and r.pinned)

    @property
    def policy_text(self) -> str:
        text = f"keeps the newest {self.policy.keep}"
        if self.policy.best_metric:
            text += f" and the best {self.policy.best_count} by {self.policy.best_metric} ({self.policy.best_mode})"
        return text + ", and every checkpoint a forked run needs"


def run_checkpoints(run: Run) -> CheckpointListing:
    """The checkpoints in the run's folder, newest first, with their reasons to be kept."""
    folder = run_dir_for(run)
    policy = ckpt.RetentionPolicy.from_config((run.config or {}).get("checkpoint") or {})
    found = {ckpt.checkpoint_step(c): c for c in ckpt.list_checkpoints(folder)}
    metric_at = {}
    if policy.best_metric:
        for step, path in found.items():
            value = ckpt.read_meta(path).get("metrics", {}).get(policy.best_metric)
            if isinstance(value, (int, float)):
                metric_at[step] = float(value)
    pins = ckpt.read_pins(folder)
    steps = sorted(set(found) | set(pins), reverse=True)
    reasons = ckpt.retention(list(found), policy, metric_at, pins)
    rows = []
    for step in steps:
        holders = pins.get(step, [])
        if step in found:
            why = reasons[step] or ["not cleaned up yet (the next checkpoint applies the rule)"]
            rows.append(
                CheckpointRow(step, ckpt.folder_bytes(found[step]), why, metric_at.get(step), _runs_of(holders))
            )
        else:
            rows.append(
                CheckpointRow(step, None, [f"pinned by {h}, not written yet" for h in holders], None, _runs_of(holders))
            )
    return CheckpointListing(folder, rows, policy)


def _runs_of(holders: list[str]) -> list[int]:
    return [int(m.group(1)) for h in holders if (m := _HOLDER.match(h))]
