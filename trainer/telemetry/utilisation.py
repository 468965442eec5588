"""Where a training step's time went: the trainer's and the generator's idle time, the waits, the
weight hand-over, and tokens per second trained and generated.

One job: turn what the loop measured into the `perf/*` utilisation keys of one step (documented in
metric_keys.py). In stale_k mode one process generates, then trains, so each side idles while the
other works; in async mode the generator process keeps cumulative counters (`GeneratorClock`),
and a step reports what they moved by since the previous step (`GeneratorClock.since`).
"""

from __future__ import annotations

from dataclasses import dataclass

GEN_COUNTERS = ("busy_s", "idle_s", "wait_weights_s", "load_s", "tokens")


@dataclass
class GeneratorTime:
    """What the generator did over a window of `wall_s` seconds."""

    wall_s: float = 0.0
    busy_s: float = 0.0  # generating, scoring and recomputing behaviour log-probs
    idle_s: float = 0.0  # neither generating nor loading weights
    wait_weights_s: float = 0.0  # of idle_s: held back until newer weights arrive (the staleness bound)
    load_s: float = 0.0  # loading published weights
    tokens: float = 0.0  # response tokens generated (dropped batches included)


class GeneratorClock:
    """Cumulative counters in shared memory, written by the generator process only."""

    def __init__(self, ctx):
        self.values = {name: ctx.Value("d", 0.0, lock=False) for name in GEN_COUNTERS}

    def add(self, name: str, amount: float) -> None:
        self.values[name].value += amount

    def snapshot(self) -> dict[str, float]:
        return {name: v.value for name, v in self.values.items()}

    @staticmethod
    def since(now: dict[str, float], before: dict[str, float], wall_s: float) -> GeneratorTime:
        return GeneratorTime(wall_s=wall_s, **{k: now[k] - before.get(k, 0.0) for k in GEN_COUNTERS})


def _ratio(part: float, whole: float) -> float:
    return min(1.0, max(0.0, part / whole)) if whole > 0 else 0.0


def stale_k_utilisation(
    gen_s: float, train_s: float, gen_tokens: float, trained_tokens: float, sync: dict, step_s: float
) -> dict[str, float]:
    """One process, one thing at a time: the trainer idles while it generates, the generator while
    it trains. `sync`: Rollouts.take_weight_sync(), the step's hand-over to a separate engine (vllm)."""
    idle_gen = max(0.0, step_s - gen_s)
    return {
        "perf/trainer_idle_s": gen_s,
        "perf/trainer_idle_ratio": _ratio(gen_s, step_s),
        "perf/gen_idle_s": idle_gen,
        "perf/gen_idle_ratio": _ratio(idle_gen, step_s),
        "perf/wait_weights_s": 0.0,
        "perf/weight_sync_bytes": float(sync.get("perf/weight_sync_bytes", 0.0)),
        "perf/train_tokens_per_s": trained_tokens / train_s if train_s > 0 else 0.0,
        "perf/gen_tokens_per_s": gen_tokens / gen_s if gen_s > 0 else 0.0,
    }


def async_utilisation(
    wait_s: float, train_s: float, trained_tokens: float, gen: GeneratorTime, publish: dict, step_s: float
) -> dict[str, float]:
    """The trainer idles while it waits for a batch; the generator's own counters over the window
    since the previous step say when it idled. `publish`: seconds and bytes the trainer spent
    publishing weights this step."""
    return {
        "perf/trainer_idle_s": wait_s,
        "perf/trainer_idle_ratio": _ratio(wait_s, step_s),
        "perf/gen_idle_s": gen.idle_s,
        "perf/gen_idle_ratio": _ratio(gen.idle_s, gen.wall_s),
        "perf/wait_weights_s": gen.wait_weights_s,
        "perf/weight_publish_s": float(publish.get("seconds", 0.0)),
        "perf/weight_load_s": gen.load_s,
        "perf/weight_sync_bytes": float(publish.get("bytes", 0.0)),
        "perf/train_tokens_per_s": trained_tokens / train_s if train_s > 0 else 0.0,
        "perf/gen_tokens_per_s": gen.tokens / gen.busy_s if gen.busy_s > 0 else 0.0,
    }


def state_bytes(state: dict) -> int:
    """Bytes of a state dict's tensors: what one weight publish copies."""
    return int(sum(v.numel() * v.element_size() for v in state.values() if hasattr(v, "element_size")))
