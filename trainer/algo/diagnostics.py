"""Off-policy diagnostics on every optimizer update, for every objective.

One job: from the log-ratios the loss pass already computed (no extra forward pass), say how far the
current policy is from the behaviour policy, and whether a few tokens carry the update. The loop
hands in the whole minibatch (every micro-batch of one update, concatenated); under torchrun each
rank computes its own share and the step's metrics take the mean over ranks (`*_max`: the largest).

    update_diagnostics(log_r, adv, mask) -> {UPDATE_KEYS: float}
    engine_diagnostics(rollout_logp, behav_logp, mask) -> {ENGINE_KEYS: float}

Tensors are (batch, tokens); log_r = log pi_theta - log pi_behav, detached; mask True on valid
response tokens. r = exp(log r); everything below is over valid tokens, in float64 (a log-ratio
of 100 is a ratio of 2.7e43, which float32 cannot hold).

    actor/ratio_{pos,neg}_{p50,p99,max}  r over the tokens with A > 0 (pos) and A < 0 (neg): the
        nearest-rank quantile sorted(r)[ceil(q n) - 1] (q = 0.5, 0.99) and the largest; 1 when there are none.
        The A < 0, r >> 1 tail is the quadrant neither M2PO's mask nor PPO's clip touches.
    actor/top_token_share_max  max_i r_i |A_i| / sum_i r_i |A_i|: the share of the update's weight
        carried by its single largest token (1 = one token sets the direction); 0 when all A = 0.
    actor/kl_k3  mean(r - 1 - log r): Schulman's K3 estimator of KL(pi_behav || pi_theta) from samples
        of pi_behav; every term is >= 0, so it does not cancel like mean(-log r) (actor/ppo_kl).
    actor/chi2   mean((r - 1)^2): the chi^2(pi_theta || pi_behav) estimate that M2 bounds (M2PO, Theorem 1).
    actor/ess_frac  (sum r)^2 / (n sum r^2): Kish's effective sample size of the weights, as a
        fraction of n (1: all weights equal); 1 when there are no tokens.

Engine (per training step, the batch's sampled tokens; pi_trainer is the trainer's recomputation of
the behaviour policy, pi_engine the sampler's log-probs):
    rollout/engine_abs_dlogp(_max)  mean (and largest) |log pi_engine - log pi_trainer|
    rollout/engine_kl_k3  mean(rho - 1 - log rho), rho = pi_trainer / pi_engine: K3 of
        KL(pi_engine || pi_trainer) from the engine's samples. rollout/engine_kl stays the K1 mean.

Two drifts, apart (`drift_stats`, under behav_logp: recompute). The ratio pi_theta / pi_engine the
loss would see is the product of w_engine = pi_trainer@behav / pi_engine (the engine's numerical
mismatch, no matter how stale) and w_policy = pi_theta / pi_trainer@behav (the policy's own drift
since the behaviour version, exactly 1 at learning rate 0). For each, over the valid tokens:
    drift/<which>_kl_k3  mean(w - 1 - log w)
    drift/<which>_abs_dlogp, _abs_dlogp_p99  mean and 99th percentile (nearest rank) of |log w|
    drift/<which>_chi2  mean((w - 1)^2)
    drift/<which>_ess_frac  (sum w)^2 / (n sum w^2)
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer.loss_keys import (  # noqa: F401 (UPDATE_KEYS: callers import it from here)
    DRIFT_STATS,
    ENGINE_KEYS,
    UPDATE_KEYS,
)


@torch.no_grad()
def update_diagnostics(log_r: Tensor, adv: Tensor, mask: Tensor) -> dict[str, float]:
    valid = mask.bool()
    lr = log_r.detach().masked_fill(~valid, 0.0)  # (B, T)
    a = adv.detach().masked_fill(~valid, 0.0)  # (B, T), 0 on padding: neither side
    out: dict[str, float] = {}
    for side, sel in (("pos", a > 0), ("neg", a < 0)):
        values = lr.masked_select(sel)  # (n_side,) log r; exp is monotone, so r's order statistics are exp of these
        out[f"actor/ratio_{side}_p50"] = _exp(_order_statistic(values, 50))
        out[f"actor/ratio_{side}_p99"] = _exp(_order_statistic(values, 99))
        out[f"actor/ratio_{side}_max"] = _exp(values.max()) if values.numel() else 1.0
    lr64 = lr.double()  # (B, T)
    r = torch.exp(lr64).masked_fill_(~valid, 0.0)  # (B, T) r, 0 on padding
    weight = r * a.abs().double()  # (B, T) r |A|
    total = float(weight.sum())
    out["actor/top_token_share_max"] = float(weight.max()) / total if total > 0 else 0.0
    n = int(torch.count_nonzero(valid))
    excess = torch.expm1(lr64)  # (B, T) r - 1, 0 on padding
    out["actor/kl_k3"] = float((excess - lr64).sum()) / n if n else 0.0  # r - 1 - log r
    out["actor/chi2"] = float(excess.square().sum()) / n if n else 0.0  # (r - 1)^2
    sum_sq = float(r.square().sum())
    out["actor/ess_frac"] = float(r.sum()) ** 2 / (n * sum_sq) if n and sum_sq > 0 else 1.0
    return out


@torch.no_grad()
def engine_diagnostics(rollout_logp: Tensor, behav_logp: Tensor, mask: Tensor) -> dict[str, float]:
    valid = mask.bool()
    d = (rollout_logp.detach()[valid] - behav_logp.detach()[valid]).double()  # (n,) log pi_engine - log pi_trainer
    n = d.numel()
    if not n:
        return dict.fromkeys(ENGINE_KEYS, 0.0)
    return {
        "rollout/engine_abs_dlogp": float(d.abs().sum()) / n,
        "rollout/engine_abs_dlogp_max": float(d.abs().max()),
        "rollout/engine_kl_k3": float((torch.expm1(-d) + d).sum()) / n,  # rho - 1 - log rho, log rho = -d
    }


@torch.no_grad()
def drift_stats(log_w: Tensor, mask: Tensor, prefix: str) -> dict[str, float]:
    """`prefix`_{DRIFT_STATS} of the weights w = exp(log_w) over the valid tokens (float64)."""
    lw = log_w.detach()[mask.bool()].double()  # (n,)
    n = lw.numel()
    if not n:
        return {f"{prefix}_{s}": (1.0 if s == "ess_frac" else 0.0) for s in DRIFT_STATS}
    w = torch.exp(lw)
    sum_sq = float(w.square().sum())
    return {
        f"{prefix}_kl_k3": float((torch.expm1(lw) - lw).sum()) / n,
        f"{prefix}_abs_dlogp": float(lw.abs().sum()) / n,
        f"{prefix}_abs_dlogp_p99": float(_order_statistic(lw.abs(), 99)),
        f"{prefix}_chi2": float(torch.expm1(lw).square().sum()) / n,
        f"{prefix}_ess_frac": float(w.sum()) ** 2 / (n * sum_sq) if sum_sq > 0 else 1.0,
    }


def engine_drift(rollout_logp: Tensor, behav_logp: Tensor, mask: Tensor) -> dict[str, float]:
    """Engine mismatch: w = pi_trainer@behav / pi_engine over the batch's sampled tokens."""
    return drift_stats(behav_logp - rollout_logp, mask, "drift/engine")


def policy_drift(log_r: Tensor, mask: Tensor) -> dict[str, float]:
    """Policy drift: w = pi_theta / pi_trainer@behav, log_r as the loss computed it."""
    return drift_stats(log_r, mask, "drift/policy")


def _order_statistic(values: Tensor, percent: int) -> Tensor | None:
    """Nearest rank: the ceil(percent n / 100)-th smallest, in integers (k-th order statistic)."""
    n = values.numel()
    if not n:
        return None
    return torch.kthvalue(values, max(1, -(-percent * n // 100))).values


def _exp(log_value: Tensor | None) -> float:
    """exp of a log-ratio in float64 (inf past its range, never an OverflowError); 1 for none."""
    return 1.0 if log_value is None else float(torch.exp(log_value.double()))
