"""Policy objectives: M2PO (paper Algorithm 1), the released code's capping variant, baselines, and
the correction lab's objectives and options.

Interface (stable; the training loop builds on these names):

    policy_loss(name, logp, behav_logp, advantages, mask, **params) -> (loss, stats)
    policy_loss_marked(...same...) -> (loss, stats, LossMarks): also what it did to each token
    check_loss_inputs(name, behav_logp, advantages, mask, **params) -> LossParams: the checks alone,
        once per batch; then policy_loss_checked(name, p, logp, behav_logp, advantages, mask) per
        micro-batch (p.rows(rows) for a slice of the batch's rows)
    m2po_mask(log_ratio, advantages, mask, tau) -> keep
    OBJECTIVES, DUAL_CLIP_OBJECTIVES, AGG_MODES, STATS_KEYS, LossParams

Tensors, all shaped (batch, tokens) and of one floating dtype:
    logp        log pi_theta of each sampled token, with gradient
    behav_logp  log pi_behav: the policy that generated the rollout (no gradient is taken)
    advantages  per token (see trainer.algo.advantages.broadcast_to_tokens)
    mask        True (or 1) on valid response tokens; padding may hold any *finite* values

`params` are the fields of `LossParams` below. `loss` is a 0-d tensor to minimise (-J); `stats`
maps the `STATS_KEYS` to Python floats.

Notation: log r = logp - behav_logp, r = exp(log r), M2_i = (log r_i)^2. Trust-region tokens
are the valid tokens with (A > 0 and r > 1) or (A < 0 and r < 1): the ones PPO's outer min can clip.

Objectives, as the per-token objective j; J aggregates j over the valid tokens (`agg`), loss = -J:
    m2po           j = M r A; M = Algorithm 1's mask (`m2po_mask`); no clipping. With the default
                   agg, J = sum(M r A) / #valid tokens, the masked ones included (paper, eq. for J_M2PO).
    m2po_cap       the released code (Infini-AI-Lab/M2PO, `compute_m2po_policy_loss`): solve tau with
                   sum min(M2, tau^2) <= budget * n over the n trust-region tokens, then
                   j = min(r A, clip(r, exp(-tau), exp(tau)) A). No constraint when mean M2 <= budget.
    grpo           j = min(r A, clip(r, 1 - eps_low, 1 + eps_high) A); eps_high > eps_low is clip-higher.
    no_clip        j = r A ("GRPO without trust region").
    gspo           s_i = exp(mean_t log r_{i,t}) per sequence, in GSPO-token form
                   s_{i,t} = sg(s_i) pi_theta / sg(pi_theta); j = min(s A, clip(s, 1 - eps_low, 1 + eps_high) A);
                   eps (3e-4, 4e-4) and agg "seq-mean-token-mean" by default, as in GSPO.
    decoupled_ppo  AReaL: u = pi_theta / pi_prox (prox_logp required),
                   j = (pi_prox / pi_behav) min(u A, clip(u, 1 - eps_low, 1 + eps_high) A).
    cispo          MiniMax-M1 (arXiv 2506.13585, eq. 4-5; verl `compute_policy_loss_cispo`):
                   j = sg(clip(r, 1 - eps_low, 1 + eps_high)) A log pi_theta: the weight is clipped and
                   carries no gradient, so every token keeps its gradient (the weight's). No lower
                   bound by default (eps_low 1: "we did not impose a lower bound on the IS weight").
    sapo           SAPO (Gao et al., arXiv 2511.20347; verl/SkyRL `sapo`): j = f(r) A with the soft
                   gate f(r) = (4 / tau) sigmoid(tau (r - 1)), tau = sapo_tau_pos where A > 0 and
                   sapo_tau_neg elsewhere (1.0 and 1.05, the paper's). d j / d log pi = g r A with
                   g = 4 sigma (1 - sigma) in (0, 1], 1 on-policy: no hard clip anywhere.

Options (any objective unless said), applied in this order to j, each a term of its own:
    dual_clip_c=c  dual-clip PPO (Ye et al. 2020, "Mastering Complex Control in MOBA Games"; verl's
                   clip_ratio_c, 3): where A < 0, j = max(j, c A), so a token with r >> 1 cannot pull
                   the objective below c A. m2po, m2po_cap, grpo, no_clip, gspo, decoupled_ppo
                   (DUAL_CLIP_OBJECTIVES); cispo and sapo already bound their weight. Off by default.
    token_mask     IcePop (Ring-1T, arXiv 2510.18855) / MIS (verl rollout_rs "token"): j = 0 where the
                   ratio rho lies outside [token_mask_low, token_mask_high] (default [0.5, 5]).
                   token_mask_ref "behaviour": rho = pi_theta / pi_behav (detached); "engine":
                   rho = pi_behav / pi_engine (rollout_logp), the trainer/inference mismatch.
    seq_mask       Geo-RS (verl rollout_rs "geometric"): j = 0 on every token of a sequence whose
                   geometric-mean ratio exp(mean_t log rho) lies outside [seq_mask_low, seq_mask_high]
                   (low None: 1 / high); rho as for the token mask (seq_mask_ref).
    tis_cap=C      truncated importance sampling: j times the constant min(pi_behav / pi_rollout, C),
                   rollout_logp the engine's sampling log-probs and behav_logp the trainer's
                   recomputation of the same policy. The paper's TIS ablation (Fig. 10; Yao et al.).
                   C = 2 is `TIS_DEFAULT_CAP`; None (default) turns TIS off.
    sq_log_ratio_coef=beta
                   prime-rl's default loss (docs/algorithms.md, kl_tau 1e-3): loss += beta agg((log r)^2)
                   over every valid token, with gradient; the soft cousin of M2PO's hard mask.
Masked tokens stay in the normaliser (as M2PO's do); verl's rejection sampling drops them from it.

What an objective does to a token (`LossMarks`; precedence masked > clipped > reweighted, so the
three are disjoint): masked (a mask took it out: m2po, token_mask, seq_mask), clipped (a clip bound
is active and its objective is constant: PPO's clip, m2po_cap, the dual clip), reweighted (it keeps a
gradient, but its weight was changed from the plain ratio: cispo's clipped weight, the TIS cap where
it binds, sapo where the gate at least halves the gradient, g <= 1/2). no_clip and the penalty
mark nothing.

Aggregation (`agg`; default per objective: "seq-mean-token-mean" for gspo, "token-mean" otherwise):
    token-mean               sum(j) / #valid tokens
    seq-mean-token-mean      mean over non-empty sequences of (sum_t j / #valid tokens of the sequence)
    seq-mean-token-sum-norm  sum(j) / (batch * max_response_len): Dr. GRPO's constant normaliser; pass
                             the configured maximum response length (default: the tokens dimension)

Mask scope: M2PO's mask is computed over exactly the batch passed in, unless `m2po_keep` hands in
a mask computed beforehand over a larger set (the whole optimizer mini-batch across micro-batches
and ranks: trainer.algo.m2po_scope). The paper's Algorithm 1 masks over the batch; the released code
calls the loss per forward micro-batch. `algorithm.m2po_scope` chooses.

Tie-break: Algorithm 1 removes one token with the largest M2 at a time; among equal M2 values the
token with the lowest flat (row-major) index goes first. The count removed does not depend on it.
The loop condition "mean M2 over the remaining trust-region tokens > tau" is decided exactly on the
tensor's M2 values, so the result does not depend on summation order.

How the mask is computed: removing the k largest values leaves the mean of the rest, which never
increases with k, so the answer is the first k where it is <= tau: one sort (of the values above
tau, the only ones it can remove) and one cumulative sum in float64, O(N log N), no Python loop
over tokens (`_greedy_m2_drop`).

Inputs must be finite everywhere (padding too); a NaN never reaches the loss: bad input raises
ValueError naming the argument before any computation, and a ratio that overflows into a NaN loss
raises too. The checks read the tensors (a device sync each): `policy_loss` runs them on every
call; a caller that computes the loss of one batch in several calls runs `check_loss_inputs` once
and `policy_loss_checked` per call. No function here changes its inputs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction

import torch
from torch import Tensor

from trainer.loss_keys import STATS_KEYS  # noqa: F401 (callers import it from here; defined torch-free for the dashboard)
from trainer.vocabulary import AGG_MODES, DUAL_CLIP_OBJECTIVES, OBJECTIVES

MASK_REFS = ("behaviour", "engine")
MARK_KINDS = ("masked", "clipped", "reweighted")
TIS_DEFAULT_CAP = 2.0
DUAL_CLIP_DEFAULT_C = 3.0  # verl's clip_ratio_c; what a counterfactual dual clip uses when the run sets none
SAPO_REWEIGHTED_BELOW = 0.5  # sapo marks a token reweighted where its gate g <= this (the gradient at least halved)

_OBJECTIVE_DEFAULTS = {
    "gspo": {"eps_low": 3e-4, "eps_high": 4e-4, "agg": "seq-mean-token-mean"},
    "cispo": {"eps_low": 1.0},  # MiniMax-M1: no lower bound on the IS weight
}


@dataclass(frozen=True)
class LossParams:
    """Keyword parameters of `policy_loss`. None means "the objective's default"."""

    tau_m2: float = 0.04
    """m2po: Algorithm 1's threshold on the mean (log r)^2 of the remaining trust-region tokens."""
    budget: float = 0.04
    """m2po_cap: M2 budget of the released code (its `M2_budget`)."""
    eps_low: float | None = None
    """grpo, gspo, decoupled_ppo, cispo: lower clip range; None: 0.2 (gspo: 3e-4; cispo: 1, no bound)."""
    eps_high: float | None = None
    """grpo, gspo, decoupled_ppo, cispo: upper clip range; None: 0.2 (gspo: 4e-4)."""
    dual_clip_c: float | None = None
    """Dual clip: where A < 0, j = max(j, c A); c > 1; None turns it off (DUAL_CLIP_OBJECTIVES only)."""
    token_mask: bool = False
    """Mask tokens whose ratio (token_mask_ref) lies outside [token_mask_low, token_mask_high]."""
    token_mask_ref: str = "behaviour"
    """"behaviour": rho = pi_theta / pi_behav; "engine": rho = pi_behav / pi_engine (rollout_logp)."""
    token_mask_low: float = 0.5
    token_mask_high: float = 5.0
    seq_mask: bool = False
    """Mask sequences whose geometric-mean ratio (seq_mask_ref) lies outside [seq_mask_low, seq_mask_high]."""
    seq_mask_ref: str = "behaviour"
    seq_mask_low: float | None = None
    """None: 1 / seq_mask_high."""
    seq_mask_high: float = 1.001
    sq_log_ratio_coef: float = 0.0
    """beta of the penalty beta agg((log r)^2); 0 turns it off."""
    sapo_tau_pos: float = 1.0
    """sapo: gate temperature where A > 0."""
    sapo_tau_neg: float = 1.05
    """sapo: gate temperature where A <= 0."""
    tis_cap: float | None = None
    """Truncated importance sampling cap C (TIS_DEFAULT_CAP = 2); None turns TIS off."""
    rollout_logp: Tensor | None = None
    """TIS and the "engine" masks: the inference engine's log-probs of the sampled tokens, (batch, tokens)."""
    prox_logp: Tensor | None = None
    """decoupled_ppo: log-probs of the proximal policy (before this update), shape (batch, tokens)."""
    agg: str | None = None
    """Aggregation, one of AGG_MODES; None: seq-mean-token-mean for gspo, token-mean otherwise."""
    max_response_len: int | None = None
    """seq-mean-token-sum-norm: the constant normaliser per sequence; None: the tokens dimension."""
    m2po_keep: Tensor | None = None
    """m2po: Algorithm 1's mask computed beforehand over a larger scope (`m2po_mask`'s output,
    shape (batch, tokens), False at removed tokens); None: computed over this batch."""

    def rows(self, rows: slice) -> LossParams:
        """The same parameters for a slice of the batch's rows: its per-token tensors cut alike."""
        tensors = ("rollout_logp", "prox_logp", "m2po_keep")
        return dataclasses.replace(self, **{f: getattr(self, f)[rows] for f in tensors if getattr(self, f) is not None})


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Batch:
    """The validated inputs, with what every objective and the stats share."""

    logp: Tensor  # (B, T) log pi_theta, with grad
    behav_logp: Tensor  # (B, T) log pi_behav, detached
    log_r: Tensor  # (B, T) logp - behav_logp, 0 on padding, with grad
    adv: Tensor  # (B, T) advantages, 0 on padding
    mask: Tensor  # (B, T) bool, valid response tokens
    trust: Tensor  # (B, T) bool, trust-region tokens
    m2_trust: Tensor  # (B, T) (log r)^2 on trust-region tokens, 0 elsewhere


@dataclass(frozen=True)
class LossMarks:
    """What the objective did to each valid token, as the loss computed it (no gradient).

    masked     (B, T) bool: a mask took the token out of the gradient
    clipped    (B, T) bool: a clip bound is active, the token's objective is a constant
    reweighted (B, T) bool: the token keeps a gradient, with its weight changed from the plain ratio
    log_ratio  (B, T) log pi_theta - log pi_behav as the loss saw it, 0 on padding
    The three are disjoint (precedence masked > clipped > reweighted) and False on padding.
    """

    masked: Tensor
    clipped: Tensor
    reweighted: Tensor
    log_ratio: Tensor

    @property
    def no_gradient(self) -> Tensor:
        """The tokens behind actor/clip_frac: masked or clipped."""
        return self.masked | self.clipped


def policy_loss(
    name: str, logp: Tensor, behav_logp: Tensor, advantages: Tensor, mask: Tensor, **params
) -> tuple[Tensor, dict[str, float]]:
    """The loss (-J) of objective `name` and its stats; see the module docstring."""
    loss, stats, _ = policy_loss_marked(name, logp, behav_logp, advantages, mask, **params)
    return loss, stats


def policy_loss_marked(
    name: str, logp: Tensor, behav_logp: Tensor, advantages: Tensor, mask: Tensor, **params
) -> tuple[Tensor, dict[str, float], LossMarks]:
    """`policy_loss`, and what it did to each token (`LossMarks`), for the rollout samples."""
    p = _validate(name, logp, behav_logp, advantages, mask, params)
    return policy_loss_checked(name, p, logp, behav_logp, advantages, mask)


def check_loss_inputs(name: str, behav_logp: Tensor, advantages: Tensor, mask: Tensor, **params) -> LossParams:
    """`policy_loss`'s checks of everything but logp, once for a batch; the parameters with the
    objective's defaults filled in, for `policy_loss_checked`."""
    return _validate(name, None, behav_logp, advantages, mask, params)


def policy_loss_checked(
    name: str, p: LossParams, logp: Tensor, behav_logp: Tensor, advantages: Tensor, mask: Tensor
) -> tuple[Tensor, dict[str, float], LossMarks]:
    """`policy_loss_marked` on inputs `check_loss_inputs` passed (or a slice of their rows, with
    `p.rows`), without checking them again. logp is not checked: a NaN there still raises, as
    the loss it makes."""
    mask = mask.bool()
    pad = ~mask  # (B, T)
    behav_logp = behav_logp.detach()
    adv = advantages.detach().masked_fill(pad, 0.0)  # (B, T)
    log_r = (logp - behav_logp).masked_fill_(pad, 0.0)  # (B, T), with grad
    with torch.no_grad():
        trust = _trust_region(log_r.detach(), adv)  # (B, T)
        m2 = log_r.detach().masked_fill(~trust, 0.0).square_()  # (B, T) M2_i on the trust region
    batch = _Batch(logp, behav_logp, log_r, adv, mask, trust, m2)

    j, marks, extra = _SURROGATES[name](batch, p)  # j: (B, T) per-token objective, 0 on padding
    if p.dual_clip_c is not None:
        j, marks, extra["actor/dual_clip_frac"] = _dual_clip(j, batch, marks, p.dual_clip_c)
    if p.token_mask:
        j, marks, extra["actor/token_mask_frac"] = _token_mask(j, batch, marks, p)
    if p.seq_mask:
        j, marks, extra["actor/seq_mask_frac"] = _seq_mask(j, batch, marks, p)
    if p.tis_cap is not None:
        j, marks = _tis(j, batch, marks, p)
    loss = -_aggregate(j, mask, p.agg, p.max_response_len)
    if p.sq_log_ratio_coef:
        penalty = p.sq_log_ratio_coef * _aggregate(
            log_r.square(), mask, p.agg, p.max_response_len
        )  # beta agg((log r)^2)
        loss = loss + penalty
        extra["actor/sq_log_ratio_penalty"] = float(penalty.detach())

    if bool(torch.isnan(loss)):
        raise ValueError(
            f"logp: the {name} loss is NaN because an importance ratio overflows "
            f"{logp.dtype} (largest log r = {float(log_r.detach().max()):.4g})"
        )
    out = LossMarks(marks.masked, marks.clipped, marks.reweighted, log_r.detach())
    return loss, _stats(loss, batch, out, extra), out


def m2po_mask(log_ratio: Tensor, advantages: Tensor, mask: Tensor, tau: float) -> Tensor:
    """Algorithm 1's mask M: False exactly at the trust-region tokens it removes, True elsewhere
    (padding included). Same shape as `log_ratio`; never masks a token outside the trust region.

    The same mask as the paper's loop, written literally in trainer/algo/m2po_algorithm1.py (the tests
    check the two agree token for token):

        log_r = log_r.masked_fill(~mask.bool(), 0.0)
        m2 = (log_r * log_r).flatten().tolist()
        a, lr = adv.flatten().tolist(), log_r.flatten().tolist()
        keep = [True] * len(m2)  # M <- True for all tokens
        region = [i for i in range(len(m2)) if (a[i] > 0 and lr[i] > 0) or (a[i] < 0 and lr[i] < 0)]
        while region and sum(Fraction(m2[i]) for i in region) > Fraction(tau) * len(region):
            j = max(region, key=lambda i: (m2[i], -i))  # argmax_T M2
            keep[j] = False  # M_j <- False
            region.remove(j)  # T <- T minus {j}

    Here instead: one sort and one cumulative sum (`_greedy_m2_drop`), O(N log N)."""
    _check_tensor("log_ratio", log_ratio, None)
    _check_tensor("advantages", advantages, log_ratio)
    _check_mask(mask, log_ratio)
    _check_positive("tau", tau)
    with torch.no_grad():
        pad = ~mask.bool()
        log_r = log_ratio.detach().masked_fill(pad, 0.0)  # (B, T)
        trust = _trust_region(log_r, advantages.detach().masked_fill(pad, 0.0))  # (B, T)
        m2 = log_r.masked_fill_(~trust, 0.0).square_()  # (B, T)
        dropped = _greedy_m2_drop(m2, int(torch.count_nonzero(trust)), tau)
    return ~dropped


def m2po_drop_values(m2: Tensor, tau: float) -> Tensor:
    """Algorithm 1 over a flat list of trust-region M2 values (all > 0), in the order given:
    which of them it removes (bool, same shape). Used to mask across micro-batches and ranks."""
    _check_positive("tau", tau)
    flat = m2.detach().reshape(1, -1)
    return _greedy_m2_drop(flat, flat.shape[1], tau).reshape(m2.shape)


def _trust_region(log_r: Tensor, adv: Tensor) -> Tensor:
    """Tokens PPO's outer min can clip: (A > 0 and r > 1) or (A < 0 and r < 1)."""
    return ((adv > 0) & (log_r > 0)) | ((adv < 0) & (log_r < 0))


@dataclass(frozen=True)
class _Marks:
    """(B, T) bool each, disjoint, False on padding; see LossMarks."""

    masked: Tensor
    clipped: Tensor
    reweighted: Tensor

    @staticmethod
    def none(like: Tensor) -> _Marks:
        zeros = torch.zeros_like(like, dtype=torch.bool)
        return _Marks(zeros, zeros, zeros)

    def mask(self, out: Tensor) -> _Marks:
        """`out` masked on top: masked wins over the other two."""
        return _Marks(self.masked | out, self.clipped & ~out, self.reweighted & ~out)

    def clip(self, out: Tensor) -> _Marks:
        """`out` clipped on top of tokens not already masked."""
        out = out & ~self.masked
        return _Marks(self.masked, self.clipped | out, self.reweighted & ~out)

    def reweight(self, out: Tensor) -> _Marks:
        """`out` reweighted where the token still has a gradient."""
        return _Marks(self.masked, self.clipped, self.reweighted | (out & ~self.masked & ~self.clipped))


# ---------------------------------------------------------------------------------------------
# Surrogates. Each returns (j, marks, extra): j (B, T) is the per-token objective to maximise, 0 on
# padding; marks (`_Marks`) what it did to each valid token; extra holds objective-specific stats.
# ---------------------------------------------------------------------------------------------


def _m2po(b: _Batch, p: LossParams):
    if p.m2po_keep is not None:
        dropped = ~p.m2po_keep.bool() & b.mask  # (B, T) the mini-batch's mask, this batch's rows
    else:
        dropped = _greedy_m2_drop(b.m2_trust, int(torch.count_nonzero(b.trust)), p.tau_m2)  # (B, T)
    masked_ratio = torch.exp(b.log_r.masked_fill(dropped, -math.inf))  # (B, T) M r: exactly 0 where M = 0
    j = masked_ratio * b.adv  # (B, T) M r A; 0 on padding, where A = 0
    return j, _Marks.none(b.mask).mask(dropped), {"actor/m2po_tau": p.tau_m2}


def _m2po_cap(b: _Batch, p: LossParams):
    tau = _solve_cap_tau(b.m2_trust[b.trust], p.budget)
    ratio = torch.exp(b.log_r)  # (B, T)
    if tau is None:  # mean M2 within the budget: the released code sets no constraint
        return ratio * b.adv, _Marks.none(b.mask), {"actor/m2po_tau": 0.0}
    j, clipped = _ppo_clip(ratio, b.adv, math.exp(-tau), math.exp(tau))
    return j, _Marks.none(b.mask).clip(clipped), {"actor/m2po_tau": tau}


def _grpo(b: _Batch, p: LossParams):
    ratio = torch.exp(b.log_r)  # (B, T)
    j, clipped = _ppo_clip(ratio, b.adv, 1.0 - p.eps_low, 1.0 + p.eps_high)
    return j, _Marks.none(b.mask).clip(clipped), {}


def _no_clip(b: _Batch, p: LossParams):
    ratio = torch.exp(b.log_r)  # (B, T)
    return ratio * b.adv, _Marks.none(b.mask), {}


def _gspo(b: _Batch, p: LossParams):
    lengths = b.mask.sum(dim=1).clamp(min=1)  # (B,)
    seq_log_s = b.log_r.detach().sum(dim=1) / lengths  # (B,) log s_i: mean token log-ratio
    log_s = seq_log_s[:, None] + (b.logp - b.logp.detach())  # (B, T) value log s_i, gradient of log pi_t
    ratio = torch.exp(log_s)  # (B, T)
    j, clipped = _ppo_clip(ratio, b.adv, 1.0 - p.eps_low, 1.0 + p.eps_high)
    return j, _Marks.none(b.mask).clip(clipped), {}


def _decoupled_ppo(b: _Batch, p: LossParams):
    prox_logp = p.prox_logp.detach()
    pad = ~b.mask
    ratio = torch.exp((b.logp - prox_logp).masked_fill_(pad, 0.0))  # (B, T) u = pi_theta / pi_prox
    behav_weight = torch.exp((prox_logp - b.behav_logp).masked_fill_(pad, 0.0))  # (B, T) pi_prox / pi_behav
    j, clipped = _ppo_clip(ratio, b.adv, 1.0 - p.eps_low, 1.0 + p.eps_high)
    return behav_weight * j, _Marks.none(b.mask).clip(clipped), {}


def _cispo(b: _Batch, p: LossParams):
    with torch.no_grad():
        ratio = torch.exp(b.log_r.detach())  # (B, T) r
        low, high = 1.0 - p.eps_low, 1.0 + p.eps_high
        weight = ratio.clamp(low, high)  # (B, T) sg(clip(r, 1 - eps_low, 1 + eps_high))
        truncated = b.mask & (b.adv != 0) & ((ratio < low) | (ratio > high))
    logp = b.logp.masked_fill(~b.mask, 0.0)  # (B, T) padding may hold any finite value
    j = weight * b.adv * logp  # (B, T) sg(w) A log pi
    return j, _Marks.none(b.mask).reweight(truncated), {}


def _sapo(b: _Batch, p: LossParams):
    ratio = torch.exp(b.log_r)  # (B, T) r, with gradient
    tau = torch.full_like(b.adv, p.sapo_tau_neg).masked_fill_(b.adv > 0, p.sapo_tau_pos)  # (B, T), in the inputs' dtype
    gate = torch.sigmoid(tau * (ratio - 1.0))  # (B, T) sigma(tau (r - 1))
    j = (4.0 / tau) * gate * b.adv  # (B, T) f(r) A
    with torch.no_grad():
        g = 4.0 * gate * (1.0 - gate)  # (B, T) the gradient's weight against plain r A
        halved = b.mask & (b.adv != 0) & (g <= SAPO_REWEIGHTED_BELOW)
    return j, _Marks.none(b.mask).reweight(halved), {}


_SURROGATES = {
    "m2po": _m2po,
    "m2po_cap": _m2po_cap,
    "grpo": _grpo,
    "no_clip": _no_clip,
    "gspo": _gspo,
    "decoupled_ppo": _decoupled_ppo,
    "cispo": _cispo,
    "sapo": _sapo,
}
assert tuple(_SURROGATES) == OBJECTIVES


def _ppo_clip(ratio: Tensor, adv: Tensor, low_bound: float, high_bound: float):
    """PPO's min(r A, clip(r, low, high) A), and where the clip term wins (no gradient)."""
    unclipped = ratio * adv  # (B, T)
    clipped = ratio.clamp(low_bound, high_bound) * adv  # (B, T)
    j = torch.minimum(unclipped, clipped)  # (B, T)
    with torch.no_grad():
        active = clipped < unclipped  # (B, T); never on padding, where A = 0
    return j, active


# ---------------------------------------------------------------------------------------------
# Options, applied to j in order. Each returns the new j and marks (and its own stat).
# ---------------------------------------------------------------------------------------------


def _dual_clip(j: Tensor, b: _Batch, marks: _Marks, c: float):
    """Where A < 0: j = max(j, c A); the bound is a constant, so the token loses its gradient."""
    bound = c * b.adv  # (B, T)
    with torch.no_grad():
        active = (b.adv < 0) & (bound > j)  # (B, T); never on padding, where A = 0
    j = torch.where(active, bound, j)
    return j, marks.clip(active), _frac(active, b.mask)


def _mask_log_ratio(b: _Batch, p: LossParams, ref: str) -> Tensor:
    """log rho of the masks, detached, 0 on padding: behaviour log r, or engine log pi_behav - log pi_engine."""
    if ref == "behaviour":
        return b.log_r.detach()
    return (b.behav_logp - p.rollout_logp.detach()).masked_fill_(~b.mask, 0.0)


def _token_mask(j: Tensor, b: _Batch, marks: _Marks, p: LossParams):
    with torch.no_grad():
        rho = torch.exp(_mask_log_ratio(b, p, p.token_mask_ref))  # (B, T)
        out = b.mask & ((rho < p.token_mask_low) | (rho > p.token_mask_high))
    return j.masked_fill(out, 0.0), marks.mask(out), _frac(out, b.mask)


def _seq_mask(j: Tensor, b: _Batch, marks: _Marks, p: LossParams):
    with torch.no_grad():
        lengths = b.mask.sum(dim=1)  # (B,)
        log_geo = _mask_log_ratio(b, p, p.seq_mask_ref).sum(dim=1) / lengths.clamp(min=1)  # (B,) mean_t log rho
        geo = torch.exp(log_geo)  # (B,) the geometric-mean ratio
        low = p.seq_mask_low if p.seq_mask_low is not None else 1.0 / p.seq_mask_high
        out_seq = (lengths > 0) & ((geo < low) | (geo > p.seq_mask_high))  # (B,)
        out = out_seq[:, None] & b.mask  # (B, T)
        frac = int(torch.count_nonzero(out_seq)) / max(int(torch.count_nonzero(lengths)), 1)
    return j.masked_fill(out, 0.0), marks.mask(out), frac


def _tis(j: Tensor, b: _Batch, marks: _Marks, p: LossParams):
    with torch.no_grad():
        engine_ratio = torch.exp((b.behav_logp - p.rollout_logp.detach()).masked_fill_(~b.mask, 0.0))  # (B, T)
        capped = b.mask & (b.adv != 0) & (engine_ratio > p.tis_cap)
    weight = engine_ratio.clamp(max=p.tis_cap)  # (B, T) min(pi_behav / pi_rollout, C)
    return j * weight, marks.reweight(capped)


def _frac(tokens: Tensor, mask: Tensor) -> float:
    return int(torch.count_nonzero(tokens)) / max(int(torch.count_nonzero(mask)), 1)


# ---------------------------------------------------------------------------------------------
# M2PO Algorithm 1: the greedy mask, from one sort and one cumulative sum
# ---------------------------------------------------------------------------------------------


def _greedy_m2_drop(m2: Tensor, n: int, tau: float) -> Tensor:
    """The tokens Algorithm 1 removes (bool, m2's shape), given M2 on the n trust-region tokens, 0 elsewhere.

    A removed value is at least the mean it lowers, which exceeds tau, so only the values above tau
    are sorted (above tau / 2: still below tau once rounded to m2's dtype); the rest count by their
    sum. With those sorted descending, removing the first k leaves a mean that never increases with
    k: the loop stops at the first k where it is <= tau, at the latest once all are gone. A float64
    cumulative sum decides each k where it is farther from tau than its rounding error can reach; a
    k within that error is decided in rational arithmetic, as the paper's loop does. The k removed
    are every value above the k-th largest, w, and as many of those equal to w as needed, lowest
    flat index first.
    """
    flat = m2.reshape(-1)  # (N,)
    big = flat > tau / 2
    dropped = torch.zeros(m2.shape, dtype=torch.bool, device=m2.device)
    values = torch.sort(flat[big], descending=True).values  # (c,) largest first
    if values.numel() == 0:
        return dropped
    others = torch.where(big, 0.0, flat).sum(dtype=torch.float64)  # the values never removed
    rest = values.double().flip(0).cumsum(0).flip(0) + others  # (c,) sum of what is left after the first k
    left = n - torch.arange(values.numel(), dtype=torch.float64, device=m2.device)  # (c,) n - k
    gap = rest - tau * left  # (c,) > 0 where the mean of what is left exceeds tau
    error = 2 * (n + 2) * 2.0**-53 * (float(rest[0]) + tau * n)
    maybe_stops = torch.nonzero(gap <= error).squeeze(1)
    k = int(maybe_stops[0]) if maybe_stops.numel() else values.numel()  # every k before it surely goes on
    while k < values.numel() and gap[k] >= -error and _mean_exceeds(flat[flat > 0], values[:k], tau, n - k):
        k += 1
    if k == 0:
        return dropped

    w = values[k - 1]
    torch.gt(m2, w, out=dropped)
    ties_to_drop = k - int(torch.count_nonzero(dropped))
    if ties_to_drop:
        ties = torch.nonzero(flat == w).squeeze(1)  # (t,) flat indices, ascending
        dropped.view(-1)[ties[:ties_to_drop]] = True
    return dropped


def _mean_exceeds(values: Tensor, removed: Tensor, tau: float, count: int) -> bool:
    """The mean of `values` without the `removed` ones (count of them left) > tau, exactly:
    Algorithm 1's loop condition."""
    left = sum(map(Fraction, values.tolist())) - sum(map(Fraction, removed.tolist()))
    return left > Fraction(tau) * count


# ---------------------------------------------------------------------------------------------
# m2po_cap: the released code's tau solver (`_solve_tau_from_sorted_delta2`), behaviour kept
# ---------------------------------------------------------------------------------------------


def _solve_cap_tau(delta_sq: Tensor, budget: float) -> float | None:
    """tau such that sum min(delta^2, tau^2) <= budget * n, as the released code picks it:
    None when mean delta^2 <= budget (+1e-12); else sorted ascending, the first k with
    delta_k^2 (n - k - 1) + sum_{i<=k} delta_i^2 >= budget * n, and tau = sqrt(delta_{k-1}^2 - 1e-12)
    (0 when k = 0). The 1e-12 offsets are the released code's."""
    n = delta_sq.numel()
    if n == 0:
        return None
    total = float(delta_sq.sum(dtype=torch.float64))
    target = budget * n
    if total / n <= budget + 1e-12 or target >= total - 1e-12:
        return None
    if target <= 1e-12:
        return 0.0
    # Only the values above `low` need sorting: for a sorted v_k < low, capped_k below is at most
    # sum_i min(v_i, v_k) <= n v_k < target minus a margin far above the 1e-12 offsets and float64's
    # rounding, so k is never one of them (a stale batch's M2 is mostly tiny: this sorts ~1/5 of it).
    low = budget * (1.0 - 1e-6)
    below = delta_sq < low if target * 1e-6 > 1e-9 else torch.zeros_like(delta_sq, dtype=torch.bool)
    m = int(torch.count_nonzero(below))
    # sorted in the input's dtype (half the bytes of float64 for float32), then summed in float64
    values = torch.sort(delta_sq[~below]).values.to(torch.float64)  # (n - m,) the sorted array's entries m..n-1
    csum = torch.cumsum(values, dim=0) + float(delta_sq[below].sum(dtype=torch.float64))  # (n - m,) csum_k
    rest = torch.arange(n - m - 1, -1, -1, dtype=torch.float64, device=values.device)  # (n - m,) n - k - 1
    capped = (values - 1e-12) * rest + csum  # (n - m,)
    reached = torch.nonzero(capped >= target - 1e-12).squeeze(1)
    if reached.numel() == 0:
        return None
    k = m + int(reached[0])
    if k == 0:
        return 0.0
    before = float(values[k - m - 1]) if k > m else float(delta_sq[below].max())  # v_{k-1}
    return math.sqrt(max(before - 1e-12, 0.0))


# ---------------------------------------------------------------------------------------------
# Aggregation and stats
# ---------------------------------------------------------------------------------------------


def _aggregate(j: Tensor, mask: Tensor, agg: str, max_response_len: int | None) -> Tensor:
    """J from the per-token objective j (B, T), which is 0 on padding."""
    if agg == "token-mean":
        return j.sum() / torch.count_nonzero(mask).clamp(min=1)
    if agg == "seq-mean-token-mean":
        lengths = mask.sum(dim=1)  # (B,)
        per_seq = j.sum(dim=1) / lengths.clamp(min=1)  # (B,)
        return per_seq.sum() / torch.count_nonzero(lengths).clamp(min=1)
    normaliser = max_response_len if max_response_len is not None else mask.shape[1]
    return j.sum() / (mask.shape[0] * normaliser)  # seq-mean-token-sum-norm


@torch.no_grad()
def _stats(loss: Tensor, b: _Batch, marks: LossMarks, extra: dict) -> dict[str, float]:
    """The STATS_KEYS as floats. Means over an empty set are 0 (ratios: 1)."""
    log_r = b.log_r.detach()  # (B, T), 0 on padding
    n_valid = int(torch.count_nonzero(b.mask))
    n_pad = b.mask.numel() - n_valid
    n_trust = int(torch.count_nonzero(b.trust))
    dropped = marks.no_gradient  # (B, T)
    n_low, n_high = int(torch.count_nonzero(dropped & (b.adv < 0))), int(torch.count_nonzero(dropped & (b.adv > 0)))
    n_dropped = int(torch.count_nonzero(dropped))
    n_trust_after = n_trust - int(torch.count_nonzero(dropped & b.trust))
    m2_sum = float(b.m2_trust.sum())
    m2_sum_after = float(b.m2_trust.masked_fill(dropped, 0.0).sum())

    flat = log_r.reshape(-1)
    lowest, highest = (float(x) for x in torch.aminmax(flat))
    if n_pad and lowest == 0.0:  # padding holds log r = 0; look at the valid tokens alone
        lowest = float(log_r.masked_fill(~b.mask, math.inf).min())
    if n_pad and highest == 0.0:
        highest = float(log_r.masked_fill(~b.mask, -math.inf).max())
    ratio_sum = float(torch.exp(log_r).sum()) - n_pad  # padding adds exp(0) = 1 each

    denom = max(n_valid, 1)
    stats = {
        "actor/pg_loss": float(loss.detach()),
        "actor/clip_frac": n_dropped / denom,
        "actor/clip_frac_low": n_low / denom,
        "actor/clip_frac_high": n_high / denom,
        "actor/masked_frac": int(torch.count_nonzero(marks.masked)) / denom,
        "actor/clipped_frac": int(torch.count_nonzero(marks.clipped)) / denom,
        "actor/reweighted_frac": int(torch.count_nonzero(marks.reweighted)) / denom,
        "actor/dual_clip_frac": 0.0,
        "actor/token_mask_frac": 0.0,
        "actor/seq_mask_frac": 0.0,
        "actor/sq_log_ratio_penalty": 0.0,
        "actor/m2": m2_sum / max(n_trust, 1),
        "actor/m2_after": m2_sum_after / max(n_trust_after, 1),
        "actor/m2_all": float(torch.dot(flat, flat)) / denom,
        "actor/ppo_kl": -float(flat.sum()) / denom,
        "actor/ratio_mean": ratio_sum / n_valid if n_valid else 1.0,
        "actor/ratio_min": math.exp(lowest) if n_valid else 1.0,
        "actor/ratio_max": math.exp(highest) if n_valid else 1.0,
        "actor/tr_frac": n_trust / denom,
        "actor/m2po_tau": 0.0,
    }
    stats.update(extra)
    return stats


# ---------------------------------------------------------------------------------------------
# Validation: every check runs before any computation and names the offending argument
# ---------------------------------------------------------------------------------------------


def _validate(name, logp, behav_logp, advantages, mask, params) -> LossParams:
    if name not in OBJECTIVES:
        raise ValueError(f"name: unknown objective {name!r}; known: {', '.join(OBJECTIVES)}")
    known = {f.name for f in dataclasses.fields(LossParams)}
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown parameter; known: {', '.join(sorted(known))}")
    if logp is not None:  # None: check_loss_inputs, the batch's tensors alone
        _check_tensor("logp", logp, None)
    _check_tensor("behav_logp", behav_logp, logp)
    like = logp if logp is not None else behav_logp
    _check_tensor("advantages", advantages, like)
    _check_mask(mask, like)

    values = {**_OBJECTIVE_DEFAULTS.get(name, {}), **{k: v for k, v in params.items() if v is not None}}
    values.setdefault("eps_low", 0.2)
    values.setdefault("eps_high", 0.2)
    values.setdefault("agg", "token-mean")
    p = LossParams(**values)

    _check_positive("tau_m2", p.tau_m2)
    _check_positive("budget", p.budget)
    for field in ("eps_low", "eps_high"):
        value = getattr(p, field)
        if not _is_number(value) or not (0 <= value < math.inf):
            raise ValueError(f"{field}: must be a finite number >= 0, got {value!r}")
    if p.eps_low >= 1 and not (name == "cispo" and p.eps_low == 1):  # cispo's default 1: no lower bound
        raise ValueError(f"eps_low: must be < 1 (the lower bound 1 - eps_low must stay positive), got {p.eps_low!r}")
    if p.agg not in AGG_MODES:
        raise ValueError(f"agg: unknown aggregation {p.agg!r}; known: {', '.join(AGG_MODES)}")
    if p.max_response_len is not None and (
        isinstance(p.max_response_len, bool) or not isinstance(p.max_response_len, int) or p.max_response_len < 1
    ):
        raise ValueError(f"max_response_len: must be a positive int, got {p.max_response_len!r}")
    _validate_options(name, p)
    _check_extra_tensors(name, p, like)
    return p


def _check_extra_tensors(name: str, p: LossParams, logp: Tensor) -> None:
    """The optional log-probs and masks: present where an option needs them, shaped like logp."""
    needs_engine = [
        f
        for f, on in (
            ("tis_cap", p.tis_cap is not None),
            ("token_mask_ref", p.token_mask and p.token_mask_ref == "engine"),
            ("seq_mask_ref", p.seq_mask and p.seq_mask_ref == "engine"),
        )
        if on
    ]
    if needs_engine and p.rollout_logp is None:
        raise ValueError(f"rollout_logp: required by {needs_engine[0]} (the engine's sampling log-probs)")
    if p.rollout_logp is not None:
        _check_tensor("rollout_logp", p.rollout_logp, logp)
    if p.m2po_keep is not None and (not isinstance(p.m2po_keep, Tensor) or p.m2po_keep.shape != logp.shape):
        raise ValueError(f"m2po_keep: must be a tensor shaped like logp {tuple(logp.shape)}")
    if name == "decoupled_ppo" and p.prox_logp is None:
        raise ValueError("prox_logp: required by decoupled_ppo (log-probs of the policy before this update)")
    if p.prox_logp is not None:
        _check_tensor("prox_logp", p.prox_logp, logp)


def _validate_options(name: str, p: LossParams) -> None:
    if p.tis_cap is not None:
        _check_positive("tis_cap", p.tis_cap)
    if p.dual_clip_c is not None:
        if not _is_number(p.dual_clip_c) or not (1 < p.dual_clip_c < math.inf):
            raise ValueError(
                f"dual_clip_c: must be a finite number > 1 (it bounds j at c A below the clip), got {p.dual_clip_c!r}"
            )
        if name not in DUAL_CLIP_OBJECTIVES:
            raise ValueError(
                f"dual_clip_c: does not apply to {name}, whose weight is bounded already; "
                f"it applies to {', '.join(DUAL_CLIP_OBJECTIVES)}"
            )
    for prefix in ("token_mask", "seq_mask"):
        ref = getattr(p, f"{prefix}_ref")
        if ref not in MASK_REFS:
            raise ValueError(f"{prefix}_ref: unknown reference {ref!r}; known: {', '.join(MASK_REFS)}")
        high, low = getattr(p, f"{prefix}_high"), getattr(p, f"{prefix}_low")
        _check_positive(f"{prefix}_high", high)
        if low is not None:
            _check_positive(f"{prefix}_low", low)
        if (low if low is not None else 1.0 / high) > high:
            raise ValueError(f"{prefix}_low: must not exceed {prefix}_high ({high!r}), got {low!r}")
    if not _is_number(p.sq_log_ratio_coef) or not (0 <= p.sq_log_ratio_coef < math.inf):
        raise ValueError(f"sq_log_ratio_coef: must be a finite number >= 0, got {p.sq_log_ratio_coef!r}")
    _check_positive("sapo_tau_pos", p.sapo_tau_pos)
    _check_positive("sapo_tau_neg", p.sapo_tau_neg)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_positive(field: str, value) -> None:
    if not _is_number(value) or not (0 < value < math.inf):
        raise ValueError(f"{field}: must be a finite number > 0, got {value!r}")


def _check_tensor(field: str, tensor, like: Tensor | None) -> None:
    if not isinstance(tensor, Tensor):
        raise ValueError(f"{field}: must be a torch.Tensor, got {type(tensor).__name__}")
    if not tensor.is_floating_point():
        raise ValueError(f"{field}: must be floating point, got {tensor.dtype}")
    if like is None:
        if tensor.dim() != 2:
            raise ValueError(f"{field}: must be 2-D (batch, tokens), got shape {tuple(tensor.shape)}")
    else:
        if tensor.shape != like.shape:
            raise ValueError(f"{field}: shape {tuple(tensor.shape)} does not match {tuple(like.shape)}")
        if tensor.dtype != like.dtype:
            raise ValueError(f"{field}: dtype {tensor.dtype} does not match {like.dtype}")
        if tensor.device != like.device:
            raise ValueError(f"{field}: device {tensor.device} does not match {like.device}")
    # Any NaN or inf makes the sum NaN or inf, so a finite sum clears the tensor at the cost of a sum.
    if not bool(torch.isfinite(tensor.sum())) and not bool(torch.isfinite(tensor).all()):
        bad = int((~torch.isfinite(tensor)).sum())
        raise ValueError(f"{field}: contains NaN or inf ({bad} entries; padding must be finite too)")


def _check_mask(mask, like: Tensor) -> None:
    if not isinstance(mask, Tensor):
        raise ValueError(f"mask: must be a torch.Tensor, got {type(mask).__name__}")
    if mask.shape != like.shape:
        raise ValueError(f"mask: shape {tuple(mask.shape)} does not match {tuple(like.shape)}")
    if mask.device != like.device:
        raise ValueError(f"mask: device {mask.device} does not match {like.device}")
    if mask.dtype != torch.bool and not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask: must be boolean or hold only 0 and 1")
