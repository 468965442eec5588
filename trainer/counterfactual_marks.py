"""The marks every other correction would have made in the recorded update (docs/SAMPLES.md):
each variant's loss on the tensors the real loss saw, without gradient. Which variants:
trainer/counterfactual.py; where the marks go: samples.SampleRecorder.take_counterfactual."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.counterfactual import counterfactual_variants
from trainer.distributed import max_across
from trainer.m2po_scope import minibatch_m2po_keep
from trainer.objectives import policy_loss_marked


@dataclass(frozen=True)
class Seen:
    """One micro-batch as its loss saw it (detached): for the diagnostics and the counterfactual marks."""

    rows: slice
    logp: torch.Tensor | None  # (b, T); kept only on the recorded update
    behav: torch.Tensor
    adv_tok: torch.Tensor
    rmask: torch.Tensor
    log_r: torch.Tensor
    params: dict
    rollout: torch.Tensor | None  # (b, T) the engine's log-probs, when the batch has them


def joined(seen: list[Seen], names=("log_r", "adv_tok", "rmask")) -> list[torch.Tensor]:
    """The micro-batches' tensors of each name, concatenated over the minibatch."""
    return [torch.cat([getattr(s, name) for s in seen]) for name in names]


def record_counterfactuals(seen: list[Seen], alg, samples, dist, device, several_micro: bool) -> None:
    """Every variant's marks on the recorded rows. m2po's mask takes the run's scope (the whole
    minibatch across ranks: collective, so every rank runs this); m2po_cap solves its tau per
    micro-batch as its loss does; the rest are row-local, so only the recorded rows are evaluated."""
    has_engine = all(s.rollout is not None and bool(torch.isfinite(s.rollout).all()) for s in seen)
    if dist.enabled:  # every rank must choose the same variants: their m2po masks are collective
        has_engine = max_across(int(not has_engine), dist) == 0
    for variant in counterfactual_variants(alg, has_engine=has_engine):
        keep = None
        if variant.objective == "m2po" and alg.m2po_scope == "minibatch" and (several_micro or dist.enabled):
            keep = minibatch_m2po_keep(*joined(seen), alg.tau_m2, dist)
        if samples is None:
            continue
        whole = variant.objective == "m2po_cap" or (variant.objective == "m2po" and keep is None)
        for s in seen:
            _variant_marks(s, variant, keep, whole, has_engine, samples, device)


def _variant_marks(s: Seen, variant, keep, whole: bool, has_engine: bool, samples, device) -> None:
    """One variant's marks on one micro-batch: over all its rows (`whole`) or only the recorded ones."""
    where = samples.positions(s.rows)
    if not where:
        return
    local = [p for _, p in where]
    cut = slice(None) if whole else local  # a list of rows indexes a tensor on any device
    params = {**s.params, **variant.overrides}
    params.pop("m2po_keep", None)
    if has_engine:
        params["rollout_logp"] = s.rollout
    for name in ("rollout_logp", "prox_logp"):
        if params.get(name) is not None:
            params[name] = params[name][cut]
    if keep is not None:
        params["m2po_keep"] = keep[s.rows][cut].to(device)
    with torch.no_grad():
        _, _, marks = policy_loss_marked(
            variant.objective, s.logp[cut], s.behav[cut], s.adv_tok[cut], s.rmask[cut], **params
        )
    samples.take_counterfactual(s.rows, variant.name, marks, local if whole else list(range(len(local))))
