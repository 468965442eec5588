"""M2PO's mask over the whole optimizer mini-batch, across micro-batches and ranks.

Algorithm 1 removes the trust-region tokens with the largest (log r)^2 until the mean of the rest
is at most tau. Which tokens that removes depends on the set it looks at, so computing it per
forward micro-batch (as the released code does) ties the science to a memory setting
(`train.micro_batch_size`) and to the number of GPUs. With `algorithm.m2po_scope: minibatch`
(default, the paper's batch) the trainer first computes the mini-batch's log-ratios without
gradient, runs Algorithm 1 once here over all of them, then does its backward passes with that
mask. Under torchrun every rank sends its trust-region M2 values; the values are ordered by rank,
then row, then token (the order of the whole mini-batch on one process), so ties break the same
way whatever the split.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from trainer.algo.objectives import m2po_drop_values, m2po_mask


def minibatch_m2po_keep(log_r: Tensor, adv: Tensor, mask: Tensor, tau: float, info) -> Tensor:
    """Algorithm 1's keep-mask (False at removed tokens) for this rank's rows of the mini-batch.

    log_r, adv, mask: (rows, tokens) for this rank; `info` is a trainer.policy.distributed.DistInfo."""
    if not info.enabled:
        return m2po_mask(log_r, adv, mask, tau)
    pad = ~mask.bool()
    log_r = log_r.detach().masked_fill(pad, 0.0)
    adv = adv.detach().masked_fill(pad, 0.0)
    trust = ((adv > 0) & (log_r > 0)) | ((adv < 0) & (log_r < 0))  # (rows, tokens)
    local = log_r[trust].square()  # (n_local,) row-major, in the dtype m2po_mask uses
    every = _all_gather_varlen(local, info)  # one tensor per rank
    dropped_all = (
        m2po_drop_values(torch.cat(every), tau) if sum(t.numel() for t in every) else torch.zeros(0, dtype=torch.bool)
    )
    start = sum(t.numel() for t in every[: info.rank])
    keep = torch.ones_like(trust)
    keep[trust] = ~dropped_all[start : start + local.numel()]
    return keep


def _all_gather_varlen(values: Tensor, info) -> list[Tensor]:
    """Every rank's 1-D tensor, in rank order (lengths may differ)."""
    device = info.device
    size = torch.tensor([values.numel()], dtype=torch.long, device=device)
    sizes = [torch.zeros_like(size) for _ in range(info.world)]
    dist.all_gather(sizes, size)
    longest = max(int(s) for s in sizes)
    padded = torch.zeros(longest, dtype=values.dtype, device=device)
    padded[: values.numel()] = values.to(device)
    gathered = [torch.zeros_like(padded) for _ in range(info.world)]
    dist.all_gather(gathered, padded)
    return [g[: int(n)].cpu() for g, n in zip(gathered, sizes)]
