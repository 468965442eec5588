"""Observed staleness: what the trained tokens really were, beside the configured bound.

`rollout/staleness_*` count to the start of a training step (the one definition). The bound
`staleness.max_staleness` holds for every update of the step, so the observed staleness is taken
per update, per token: the updates between the weights that generated the token and the weights
the update starts from. Each step logs its histogram (`rollout/observed_staleness/<s>`, the
fraction of the step's trained tokens, over all its updates, at staleness s), its largest value
(`rollout/observed_staleness_max`) and, in async mode, the bound (`rollout/staleness_bound`) so
that a chart or an alert rule can compare them point by point.
"""

from __future__ import annotations

import torch

HIST_PREFIX = "rollout/observed_staleness/"


class ObservedStaleness:
    """Counts of trained tokens per staleness over the updates of one step."""

    def __init__(self):
        self.counts = torch.zeros(0, dtype=torch.long)

    def add(self, mb, version: int) -> None:
        """The minibatch `mb` (a rollout.Batch) trained by the update that starts at `version`."""
        valid = mb.response_mask.bool()
        stale = (version - mb.token_versions())[valid].clamp(min=0)  # (n,) per valid token
        if not stale.numel():
            return
        counts = torch.bincount(stale)
        if counts.numel() > self.counts.numel():
            counts[: self.counts.numel()] += self.counts
            self.counts = counts
        else:
            self.counts[: counts.numel()] += counts

    def metrics(self) -> dict[str, float]:
        total = int(self.counts.sum())
        if not total:
            return {"rollout/observed_staleness_max": 0.0}
        seen = torch.nonzero(self.counts).flatten().tolist()
        out = {f"{HIST_PREFIX}{s}": int(self.counts[s]) / total for s in seen}
        out["rollout/observed_staleness_max"] = float(seen[-1])
        return out


def staleness_bound(cfg) -> dict[str, float]:
    """The configured bound as a metric (async), beside the observed values; {} in stale_k mode,
    whose staleness is set, not bounded."""
    if cfg.staleness.mode != "async":
        return {}
    return {"rollout/staleness_bound": float(cfg.staleness.max_staleness)}


def version_spans(batch) -> dict[str, float]:
    """Partial rollouts: per trajectory, the versions its valid tokens span (newest - oldest);
    their mean and largest, and the share of trajectories continued across a weight update."""
    offsets = batch.token_versions() - batch.versions[:, None]  # (B, R) >= 0
    span = (offsets * batch.response_mask.long()).amax(dim=1).float() if offsets.numel() else batch.rewards * 0
    return {
        "rollout/version_span_mean": span.mean().item(),
        "rollout/version_span_max": span.max().item(),
        "rollout/partial_frac": (span > 0).float().mean().item(),
    }
