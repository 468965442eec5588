"""M2PO's Algorithm 1, literally: the paper's greedy loop, one token at a time, the mean decided in
exact arithmetic. It is the reference the fast mask (objectives.m2po_mask) is tested against: too
slow to train with (quadratic), short enough to check against the paper at a glance.

    Algorithm 1: M2PO Masking                       (Zheng, Zhao, Chen 2025; arXiv 2510.01161)
    Input: M2_i for all training tokens; threshold tau.   Output: mask M
    M <- True for all tokens;  T <- all trust-region tokens
    while mean_{i in T} M2_i > tau:  j <- argmax_{i in T} M2_i;  M_j <- False;  T <- T \\ {j}
    return M
"""

from __future__ import annotations

from fractions import Fraction

import torch


def m2po_keep_literal(log_r: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, tau: float) -> torch.Tensor:
    """Algorithm 1's mask M (same shape as log_r; True = kept). Among equal M2 values the lowest
    flat index goes first. M2 is (log r)^2 as the loss squares it, in the tensor's dtype."""
    log_r = log_r.masked_fill(~mask.bool(), 0.0)
    m2 = (log_r * log_r).flatten().tolist()
    a, lr = adv.flatten().tolist(), log_r.flatten().tolist()
    keep = [True] * len(m2)  # M <- True for all tokens
    # T <- the trust-region tokens: the ones PPO's outer min can clip, (A > 0 and r > 1) or (A < 0 and r < 1)
    region = [i for i in range(len(m2)) if (a[i] > 0 and lr[i] > 0) or (a[i] < 0 and lr[i] < 0)]
    while region and sum(Fraction(m2[i]) for i in region) > Fraction(tau) * len(region):  # mean_T M2 > tau
        j = max(region, key=lambda i: (m2[i], -i))  # argmax_T M2
        keep[j] = False  # M_j <- False
        region.remove(j)  # T <- T \ {j}
    return torch.tensor(keep).reshape(log_r.shape)
