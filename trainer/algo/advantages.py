"""Group-normalised GRPO advantages.

Interface (stable; the training loop builds on these names):

    grpo_advantages(rewards, group_size, normalize_std=True, eps=1e-6) -> Tensor (num_groups * group_size,)
    broadcast_to_tokens(seq_advantages, mask) -> Tensor (batch, tokens)

For sequence i of group g, A_i = (R_i - mean_g R) / (std_g R + eps), with the unbiased std
(torch.std), as in the M2PO release (verl `compute_grpo_outcome_advantage`,
`norm_adv_by_std_in_grpo=True`, epsilon 1e-6). `normalize_std=False` skips the division
(Dr. GRPO). A group whose rewards are all equal gets advantage exactly 0: it carries no
signal, and a float32 mean of equal values can differ from them by an ulp (eight rewards of 0.9
average to 0.90000004), which the division by a std of ~3e-8 would blow up to A = -0.056.
"""

from __future__ import annotations

import torch
from torch import Tensor


def grpo_advantages(rewards: Tensor, group_size: int, normalize_std: bool = True, eps: float = 1e-6) -> Tensor:
    """Per-sequence GRPO advantages.

    `rewards` is either flat, shape (num_groups * group_size,), with each group's samples
    contiguous, or shaped (num_groups, group_size). The result is always flat, shape
    (num_groups * group_size,), in the same (group-major) order as the rewards.
    """
    if not isinstance(rewards, Tensor) or not rewards.is_floating_point():
        raise ValueError("rewards: must be a floating-point torch.Tensor")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ValueError(f"group_size: must be an int >= 2 (a group needs a spread), got {group_size!r}")
    if not (isinstance(eps, (int, float)) and eps >= 0):
        raise ValueError(f"eps: must be a number >= 0, got {eps!r}")
    if rewards.dim() == 2:
        if rewards.shape[1] != group_size:
            raise ValueError(
                f"rewards: shape {tuple(rewards.shape)} has groups of {rewards.shape[1]}, "
                f"but group_size is {group_size}"
            )
    elif rewards.dim() == 1:
        if rewards.numel() % group_size != 0:
            raise ValueError(f"rewards: {rewards.numel()} rewards is not a whole number of groups of {group_size}")
    else:
        raise ValueError(f"rewards: must be 1-D or 2-D, got shape {tuple(rewards.shape)}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards: contains NaN or inf")

    grouped = rewards.reshape(-1, group_size)  # (groups, G)
    equal = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)  # (groups, 1): no spread at all
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # (groups, G)
    if normalize_std:
        std = grouped.std(dim=1, keepdim=True)  # (groups, 1), unbiased
        advantages = torch.where(std > 0, centred / (std + eps), torch.zeros_like(centred))  # eps == 0 too
    else:
        advantages = centred
    return torch.where(equal, torch.zeros_like(advantages), advantages).reshape(-1)


def broadcast_to_tokens(seq_advantages: Tensor, mask: Tensor) -> Tensor:
    """Repeat each sequence's advantage over its tokens; 0 on padding. Shape (batch, tokens)."""
    if not isinstance(mask, Tensor) or mask.dim() != 2:
        raise ValueError("mask: must be a 2-D tensor (batch, tokens)")
    if not isinstance(seq_advantages, Tensor) or seq_advantages.shape != (mask.shape[0],):
        raise ValueError(f"seq_advantages: shape must be ({mask.shape[0]},) to match mask {tuple(mask.shape)}")
    return torch.where(mask.bool(), seq_advantages[:, None], 0.0)
