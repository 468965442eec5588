"""Per-token-class diagnostics: how near-deterministic tokens and forking tokens fare in an update.

The paper's regime is an LLM's: most response tokens are near-deterministic (log r stays near 0 at
any staleness) and a few forking tokens carry the learning. These stats, summed over an update's
micro-batches and logged per step, say how close a run is to it:

    actor/near_det_frac        valid response tokens where the current policy's entropy is below
                               NEAR_DET_ENTROPY nats (any task, any model)

and, when the task names its decision positions (task `forks` with the tiny model's character
tokens, see trainer/data/tasks.py), per class, decision (the forking tokens) and format (the rest):

    actor/decision_frac                   the decision tokens' share of the valid tokens
    actor/m2_decision, actor/m2_format    M2 before masking: mean (log r)^2 over the class's
                                          trust-region tokens, (A > 0, r > 1) or (A < 0, r < 1),
                                          as trainer/algo/objectives.py defines them
    actor/marked_frac_decision, ..._format  the class's valid tokens the objective masked (m2po)
                                          or clipped (clip objectives); no_clip marks none
    actor/entropy_decision, ..._format    mean entropy of the current policy over the class

They come from tensors the loss already computed (its marks and log ratios, the forward pass's
entropy): no extra forward pass. trainer/metric_keys.py lists the keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

NEAR_DET_ENTROPY = 0.1  # nats: a two-way split at about 98/2, or sharper
CLASSES = ("decision", "format")


def decision_mask(positions: list[int], shape: tuple[int, int], device) -> Tensor:
    """(B, T) bool, True in the response columns that hold a decision."""
    cols = torch.zeros(shape[1], dtype=torch.bool, device=device)
    cols[[p for p in positions if p < shape[1]]] = True
    return cols.expand(shape)


@dataclass
class TokenClassTally:
    """Sums over one update's micro-batches; `stats()` turns them into the keys above."""

    decision_positions: list[int] | None = None
    sums: dict[str, float] = field(default_factory=dict)

    def _add(self, key: str, value) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + float(value)

    @torch.no_grad()
    def add(self, mask: Tensor, entropy: Tensor, marked: Tensor, log_r: Tensor, adv: Tensor) -> None:
        """One micro-batch: mask (B, T) valid tokens, entropy (B, T) nats, marked (B, T) bool masked
        or clipped, log_r (B, T) log pi_theta - log pi_behav, adv (B, T) advantages."""
        valid = mask.bool()
        entropy = entropy.detach()
        self._add("valid", valid.sum())
        self._add("near_det", (valid & (entropy < NEAR_DET_ENTROPY)).sum())
        if self.decision_positions is None:
            return
        trust = valid & (((adv > 0) & (log_r > 0)) | ((adv < 0) & (log_r < 0)))  # (B, T)
        m2 = log_r.detach().square()
        decision = decision_mask(self.decision_positions, tuple(valid.shape), valid.device)
        for name, in_class in (("decision", decision & valid), ("format", ~decision & valid)):
            self._add(f"{name}/n", in_class.sum())
            self._add(f"{name}/trust", (in_class & trust).sum())
            self._add(f"{name}/m2", m2[in_class & trust].sum())
            self._add(f"{name}/marked", (in_class & marked.bool()).sum())
            self._add(f"{name}/entropy", entropy[in_class].sum())

    def stats(self) -> dict[str, float]:
        s = self.sums
        valid = max(s.get("valid", 0.0), 1.0)
        out = {"actor/near_det_frac": s.get("near_det", 0.0) / valid}
        if self.decision_positions is None:
            return out
        out["actor/decision_frac"] = s.get("decision/n", 0.0) / valid
        for name in CLASSES:
            n = max(s.get(f"{name}/n", 0.0), 1.0)
            out[f"actor/m2_{name}"] = s.get(f"{name}/m2", 0.0) / max(s.get(f"{name}/trust", 0.0), 1.0)
            out[f"actor/marked_frac_{name}"] = s.get(f"{name}/marked", 0.0) / n
            out[f"actor/entropy_{name}"] = s.get(f"{name}/entropy", 0.0) / n
        return out
