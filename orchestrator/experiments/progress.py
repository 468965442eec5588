"""One notion of step: a run's progress in optimizer updates and in training steps.

The trainer counts optimizer updates: every metric's `step`, the heartbeat's step and total, and so
`Run.step` / `Run.total_steps`, are updates. `train.steps` in the config counts training steps,
each one batch of `algorithm.updates_per_step x algorithm.epochs` updates. Pages show both, named.
"""

from typing import Any

from trainer.vocabulary import updates_per_step


def progress(updates: int, total_updates: int | None, config: dict[str, Any]) -> dict[str, Any]:
    """{"updates", "total_updates", "steps", "total_steps", "text"}. The total comes from the
    trainer's heartbeat, else from the config (a queued run has not said it yet)."""
    per_step = updates_per_step(config)
    configured = ((config or {}).get("train") or {}).get("steps")
    if total_updates is None and configured:
        total_updates = int(configured) * per_step
    total_steps = total_updates // per_step if total_updates is not None else None
    steps = updates // per_step
    if total_updates is None:
        text = f"update {updates} · step {steps}"
    else:
        text = f"update {updates} / {total_updates} · step {steps} / {total_steps}"
    return {
        "updates": updates,
        "total_updates": total_updates,
        "steps": steps,
        "total_steps": total_steps,
        "updates_per_step": per_step,
        "text": text,
    }


def staleness_updates(config: dict[str, Any]) -> str:
    """The paper's staleness s in optimizer updates, as a run name shows it: stale_k: s = k x
    updates_per_step x epochs (the batch's updates reach s + updates_per_step - 1); async: at most
    max_staleness."""
    staleness = (config or {}).get("staleness") or {}
    if staleness.get("mode", "stale_k") == "async":
        return f"≤ {staleness.get('max_staleness', 4)}"
    k, per_step = int(staleness.get("k", 0)), updates_per_step(config)
    return f"{k * per_step} = {k} × {per_step}"
