"""Async mode on every rank: rank 0 owns the generator process, every rank trains on its share.

Rank 0 takes each batch from the generator (async_gen.py), checks it against the staleness bound
and hands every rank its slice of whole prompt groups (the slices stale_k's ranks generate,
generation.my_slice) in one scatter, so all ranks train on the same batch with the same versions.
Weights go the other way every `sync_every` updates: every rank takes part in gathering the full
weights, and rank 0 writes them into the generator's shared memory. Alone, the collectives are
plain calls.

A failed hand-over (async_gen.SyncTimeout) is raised on rank 0 only; the other ranks wait in the
scatter, which fails when rank 0 is gone or, at the latest, at the process group's timeout
(config.collective_timeout_s, longer than the hand-over's).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from trainer.policy.distributed import DistInfo, model_state_on_main, scatter_from_main
from trainer.rollout.async_gen import AsyncGenerator
from trainer.rollout.batch import Batch
from trainer.telemetry.staleness import staleness_bound, version_spans
from trainer.telemetry.utilisation import GeneratorClock, GeneratorTime, state_bytes


@dataclass
class Delivery:
    """What every rank gets for one training step: its slice, or None when a stop was asked."""

    batch: Batch | None
    wait_s: float = 0.0
    dropped_frac: float = 0.0  # of the rows rank 0 received since the last trained batch
    dropped: float = 0.0  # those rows, counted
    queued: float = 0.0
    sync_s: float | None = None  # the vllm weight sync before this batch
    gen_time: GeneratorTime = field(default_factory=GeneratorTime)  # the generator's, since the last delivery

    def metrics(self, cfg) -> dict[str, float]:
        """The step's rollout and timing keys that come with the batch."""
        batch = self.batch
        return {
            "rollout/reward_mean": batch.rewards.mean().item(),
            "rollout/queue_batches": self.queued,
            "rollout/dropped_frac": self.dropped_frac,
            "rollout/dropped_samples": self.dropped,
            **staleness_bound(cfg),
            **(version_spans(batch) if cfg.rollout.partial else {}),
            "perf/gen_s": batch.gen_seconds,
            "perf/wait_s": self.wait_s,
            **({"perf/weight_sync_s": self.sync_s} if self.sync_s is not None else {}),
        }


def generator_seed(cfg, version: int) -> int:
    """A fresh start draws the prompts and tokens stale_k would (its seed, the same streams), so
    async at max_staleness 0 trains exactly as stale_k at k 0; a resumed run draws anew."""
    return cfg.train.seed if version == 0 else cfg.train.seed + 1000 * (1 + version)


def group_slices(batch: Batch, world: int) -> list[Batch]:
    """Each rank's equal share of the batch's prompt groups (rows are grouped by prompt). The
    batch's reward failure counts go with the first share only: the trainer sums them over ranks."""
    groups = len(batch) // batch.group_size
    per = groups // world * batch.group_size
    parts = [batch.select(torch.arange(r * per, (r + 1) * per)) for r in range(world)]
    for part in parts[1:]:
        part.reward_errors = part.reward_timeouts = 0
    return parts


class AsyncFeed:
    def __init__(self, cfg, alphabet: str, model, dist: DistInfo, version: int, threads: int):
        """Every rank builds one (the weights are gathered collectively); only rank 0 starts the generator."""
        self.cfg, self.model, self.dist = cfg, model, dist
        self.U = cfg.algorithm.updates_per_step * cfg.algorithm.epochs
        state = model_state_on_main(model, dist)
        seed = generator_seed(cfg, version)
        self.gen = AsyncGenerator(cfg, alphabet, state, version, seed, dist.device, threads) if dist.is_main else None
        self._dropped = 0
        # every rank reports the bytes of a publish, which only rank 0 can count
        self.state_bytes = scatter_from_main([state_bytes(state)] * dist.world if dist.is_main else None, dist)
        self._publish = {"seconds": 0.0, "bytes": 0.0}  # this step's, on every rank
        self._clock_at = (time.monotonic(), self.gen.ctrl.clock.snapshot() if self.gen is not None else {})

    def next(self, version: int, should_stop) -> Delivery:
        """This rank's slice of the next admissible batch (every rank calls it at the same step)."""
        items = self._take_admissible(version, should_stop) if self.gen is not None else None
        return scatter_from_main(items, self.dist)

    def _take_admissible(self, version: int, should_stop) -> list[Delivery]:
        """Rank 0: wait for a batch within the bound (dropping any that is not), sliced per rank."""
        gen, world = self.gen, self.dist.world
        while True:
            state, wait_s = gen.next_batch(should_stop)
            if state is None:
                return [Delivery(None, wait_s)] * world
            batch = Batch.from_state(state)
            worst = version + self.U - 1 - int(batch.versions.min())
            if worst <= self.cfg.staleness.max_staleness:
                break
            gen.take(trains=False, version=version)  # on_exceed wait: admission makes this impossible
            self._dropped += len(batch)
        gen.take(trains=True, version=version)
        dropped, self._dropped = float(self._dropped), 0
        dropped_frac = dropped / (dropped + len(batch))
        queued, sync_s = float(gen.queued()), gen.last_sync_s
        gen_time = self._generator_time()
        parts = group_slices(batch, world)
        return [Delivery(part, wait_s, dropped_frac, dropped, queued, sync_s, gen_time) for part in parts]

    def _generator_time(self) -> GeneratorTime:
        """Rank 0: the generator's counters moved since the previous delivery."""
        now, counters = time.monotonic(), self.gen.ctrl.clock.snapshot()
        before_t, before = self._clock_at
        self._clock_at = (now, counters)
        return GeneratorClock.since(counters, before, now - before_t)

    def take_publish(self) -> dict[str, float]:
        """Seconds and bytes of this step's weight publishes (every rank's own seconds)."""
        out, self._publish = self._publish, {"seconds": 0.0, "bytes": 0.0}
        return out

    def on_update(self, version: int) -> None:
        """After each optimizer update (every rank): publish the weights when a sync is due."""
        if version % self.cfg.staleness.sync_every:
            return
        t0 = time.perf_counter()
        state = model_state_on_main(self.model, self.dist)
        if self.gen is not None:
            self.gen.publish(state, version)
        self._publish["seconds"] += time.perf_counter() - t0
        self._publish["bytes"] += self.state_bytes

    def close(self, failed: bool = False) -> None:
        if self.gen is not None:
            self.gen.close(grace_s=0 if failed else 10)
            self.gen = None
