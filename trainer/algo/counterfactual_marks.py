"""The marks every other correction would have made in the recorded update (docs/SAMPLES.md):
each variant's marks on the tensors the real loss saw, by the client's numpy code (opl_client.marks). Which variants:
trainer/algo/counterfactual.py; where the marks go: samples.SampleRecorder.take_counterfactual."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from opl_client.marks import Params, token_marks
from trainer.algo.counterfactual import counterfactual_variants
from trainer.algo.m2po_scope import minibatch_m2po_keep
from trainer.algo.objectives import MARK_KINDS, LossMarks
from trainer.policy.distributed import max_across

MARK_PARAMS = set(Params.__dataclass_fields__)


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
    """One variant's marks on one micro-batch: over all its rows (`whole`) or only the recorded ones.
    Marked by the client's numpy code (what an SDK run's samples are marked with), which a test holds
    equal to this loss's own marks token by token."""
    where = samples.positions(s.rows)
    if not where:
        return
    local = [p for _, p in where]
    cut = slice(None) if whole else local  # a list of rows indexes a tensor on any device
    params = {**s.params, **variant.overrides}
    extra = {
        "rollout_logp": s.rollout[cut] if has_engine else None,
        "prox_logp": params["prox_logp"][cut] if params.get("prox_logp") is not None else None,
        "m2po_keep": keep[s.rows][cut] if keep is not None else None,
    }
    marks = token_marks(
        variant.objective,
        _numpy(s.logp[cut]),
        _numpy(s.behav[cut]),
        _numpy(s.adv_tok[cut]),
        _numpy(s.rmask[cut]),
        **{name: _numpy(tensor) for name, tensor in extra.items() if tensor is not None},
        **{name: value for name, value in params.items() if name in MARK_PARAMS},
    )
    as_tensors = LossMarks(*(torch.from_numpy(getattr(marks, kind)) for kind in MARK_KINDS), log_ratio=None)
    samples.take_counterfactual(s.rows, variant.name, as_tensors, local if whole else list(range(len(local))))


def _numpy(tensor: torch.Tensor):
    tensor = tensor.detach()
    if tensor.dtype in (torch.bfloat16, torch.float16):
        tensor = tensor.float()
    return tensor.cpu().numpy()
