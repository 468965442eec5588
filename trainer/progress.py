"""Where a run stands: the counters every part of the trainer reads, and a checkpoint saves."""

from __future__ import annotations

from dataclasses import dataclass, field

SAVED_COUNTERS = ("version", "train_step", "gen_step", "samples_seen", "tokens_seen", "last_eval_version")


@dataclass
class Progress:
    version: int = 0  # optimizer updates applied so far: every metric's step
    train_step: int = 0  # training steps done (each is updates_per_step x epochs updates)
    gen_step: int = 0  # batches generated (stale_k), the warm-up included
    samples_seen: float = 0.0
    tokens_seen: float = 0.0
    last_eval_version: int = -1
    last_ckpt_version: int = -1
    last_values: dict[str, float] = field(default_factory=dict)  # each metric's last value ("best checkpoint")

    def due(self, every: int, last: int) -> bool:
        """Whether a multiple of `every` updates was crossed since update `last` (every 0: never)."""
        return every > 0 and self.version // every > last // every

    def saved(self) -> dict:
        return {name: getattr(self, name) for name in SAVED_COUNTERS}

    def restore(self, state: dict) -> None:
        for name in SAVED_COUNTERS:
            setattr(self, name, state[name])
        self.last_ckpt_version = self.version
