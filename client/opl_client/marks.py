"""What each off-policy correction does to each token of a batch, in numpy, without torch.

Given a batch as any trainer has it (per-token log-probabilities of the current policy and of the
behaviour policy, advantages and a mask of response tokens), `token_marks` says, token by token,
which tokens a correction would take out of the gradient (masked), leave without gradient because a
clip bound is active (clipped), or keep with a changed weight (reweighted), at given
hyperparameters. A verl or TRL run logs its own batches through `log_samples` and sees on them which
tokens M2PO would have masked and a clip would have clipped; the bundled trainer marks its recorded
samples with the same function. The trainer's loss (trainer/algo/objectives.py) stays the reference, and
a test holds the two equal token by token.

The three marks are disjoint, with precedence masked > clipped > reweighted, and False on padding.
Decisions are taken in the inputs' floating dtype, as the loss takes them; the exponential of a
ratio may differ from torch's by one unit in the last place, so a ratio lying exactly on a clip
bound can, rarely, be marked on one side and not the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

OBJECTIVE_DEFAULTS = {
    "gspo": {"eps_low": 3e-4, "eps_high": 4e-4},
    "cispo": {"eps_low": 1.0},  # no lower bound on the importance weight
}
SAPO_REWEIGHTED_BELOW = 0.5


@dataclass(frozen=True)
class TokenMarks:
    """(B, T) bool arrays, disjoint, False on padding."""

    masked: np.ndarray
    clipped: np.ndarray
    reweighted: np.ndarray

    def mask(self, out: np.ndarray) -> TokenMarks:
        return TokenMarks(self.masked | out, self.clipped & ~out, self.reweighted & ~out)

    def clip(self, out: np.ndarray) -> TokenMarks:
        out = out & ~self.masked
        return TokenMarks(self.masked, self.clipped | out, self.reweighted & ~out)

    def reweight(self, out: np.ndarray) -> TokenMarks:
        return TokenMarks(self.masked, self.clipped, self.reweighted | (out & ~self.masked & ~self.clipped))


@dataclass(frozen=True)
class Params:
    """The hyperparameters of a correction, named as the trainer's config names them."""

    tau_m2: float = 0.04
    budget: float = 0.04
    eps_low: float = 0.2
    eps_high: float = 0.2
    dual_clip_c: float | None = None
    token_mask: bool = False
    token_mask_ref: str = "behaviour"
    token_mask_low: float = 0.5
    token_mask_high: float = 5.0
    seq_mask: bool = False
    seq_mask_ref: str = "behaviour"
    seq_mask_low: float | None = None
    seq_mask_high: float = 1.001
    tis_cap: float | None = None
    sapo_tau_pos: float = 1.0
    sapo_tau_neg: float = 1.05


@dataclass(frozen=True)
class _Batch:
    logp: np.ndarray  # (B, T) log pi_theta
    behav: np.ndarray  # (B, T) log pi_behav
    log_r: np.ndarray  # (B, T) logp - behav, 0 on padding
    adv: np.ndarray  # (B, T), 0 on padding
    mask: np.ndarray  # (B, T) bool
    rollout: np.ndarray | None  # (B, T) the engine's log-probs
    prox: np.ndarray | None  # (B, T) the proximal policy's log-probs (decoupled_ppo)


def token_marks(
    objective: str,
    logp,
    behav_logp,
    advantages,
    mask,
    *,
    rollout_logp=None,
    prox_logp=None,
    m2po_keep=None,
    **params,
) -> TokenMarks:
    """The marks of `objective` (one of MARKED_OBJECTIVES) with the options in `params` (dual_clip_c,
    token_mask, seq_mask, tis_cap, ...) on one batch. `advantages` may be (B,) per sequence or (B, T).
    `m2po_keep` (B, T) is M2PO's mask computed over a larger scope than this batch, if any."""
    if objective not in MARKED_OBJECTIVES:
        raise ValueError(f"objective: unknown {objective!r}; known: {', '.join(MARKED_OBJECTIVES)}")
    known = set(Params.__dataclass_fields__)
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown parameter; known: {', '.join(sorted(known))}")
    values = {**OBJECTIVE_DEFAULTS.get(objective, {}), **{k: v for k, v in params.items() if v is not None}}
    p = Params(**values)
    b = _batch(logp, behav_logp, advantages, mask, rollout_logp, prox_logp)
    if (p.tis_cap is not None or _engine_ref(p)) and b.rollout is None:
        raise ValueError("rollout_logp: the engine's log-probs are needed by tis_cap and the engine-referenced masks")
    if objective == "decoupled_ppo" and b.prox is None:
        raise ValueError("prox_logp: decoupled_ppo needs the proximal policy's log-probs")

    j, marks = _SURROGATES[objective](b, p, m2po_keep)
    if p.dual_clip_c is not None and objective not in ("cispo", "sapo"):
        bound = p.dual_clip_c * b.adv
        marks = marks.clip((b.adv < 0) & (bound > j))
    if p.token_mask:
        rho = np.exp(_mask_log_ratio(b, p.token_mask_ref))
        marks = marks.mask(b.mask & ((rho < p.token_mask_low) | (rho > p.token_mask_high)))
    if p.seq_mask:
        lengths = b.mask.sum(axis=1)
        log_geo = _mask_log_ratio(b, p.seq_mask_ref).sum(axis=1) / np.maximum(lengths, 1).astype(b.log_r.dtype)
        geo = np.exp(log_geo)
        low = p.seq_mask_low if p.seq_mask_low is not None else 1.0 / p.seq_mask_high
        out_seq = (lengths > 0) & ((geo < low) | (geo > p.seq_mask_high))
        marks = marks.mask(out_seq[:, None] & b.mask)
    if p.tis_cap is not None:
        engine_ratio = np.exp(np.where(b.mask, b.behav - b.rollout, 0.0).astype(b.log_r.dtype))
        marks = marks.reweight(b.mask & (b.adv != 0) & (engine_ratio > p.tis_cap))
    return marks


def _engine_ref(p: Params) -> bool:
    return (p.token_mask and p.token_mask_ref == "engine") or (p.seq_mask and p.seq_mask_ref == "engine")


def _float_array(name: str, value, like: np.ndarray | None) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "fiu":
        raise ValueError(f"{name}: must hold numbers, got dtype {array.dtype}")
    if array.dtype.kind != "f" or array.dtype.itemsize < 4:
        array = array.astype(np.float32 if like is None else like.dtype)
    if like is not None and array.shape != like.shape:
        raise ValueError(f"{name}: shape {array.shape} differs from logp's {like.shape}")
    return array


def _batch(logp, behav, adv, mask, rollout, prox) -> _Batch:
    logp = _float_array("logp", logp, None)
    if logp.ndim != 2:
        raise ValueError(f"logp: must be (sequences, tokens), got shape {logp.shape}")
    behav = _float_array("behav_logp", behav, logp).astype(logp.dtype)
    mask = np.asarray(mask).astype(bool)
    if mask.shape != logp.shape:
        raise ValueError(f"mask: shape {mask.shape} differs from logp's {logp.shape}")
    adv = np.asarray(adv)
    if adv.ndim == 1:
        adv = np.broadcast_to(adv[:, None], logp.shape)
    adv = _float_array("advantages", adv, logp).astype(logp.dtype)
    adv = np.where(mask, adv, 0).astype(logp.dtype)
    log_r = np.where(mask, logp - behav, 0).astype(logp.dtype)
    rollout = None if rollout is None else _float_array("rollout_logp", rollout, logp).astype(logp.dtype)
    prox = None if prox is None else _float_array("prox_logp", prox, logp).astype(logp.dtype)
    return _Batch(logp, behav, log_r, adv, mask, rollout, prox)


def _none(b: _Batch) -> TokenMarks:
    zeros = np.zeros(b.mask.shape, dtype=bool)
    return TokenMarks(zeros, zeros, zeros)


def _mask_log_ratio(b: _Batch, ref: str) -> np.ndarray:
    if ref == "behaviour":
        return b.log_r
    return np.where(b.mask, b.behav - b.rollout, 0).astype(b.log_r.dtype)


def _ppo_clip(ratio: np.ndarray, adv: np.ndarray, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
    """PPO's min(r A, clip(r, low, high) A), and where the clip term wins."""
    unclipped = ratio * adv
    clipped = np.clip(ratio, low, high) * adv
    return np.minimum(unclipped, clipped), clipped < unclipped


def _trust_region(b: _Batch) -> np.ndarray:
    """Tokens PPO's outer min can clip: (A > 0 and r > 1) or (A < 0 and r < 1)."""
    return ((b.adv > 0) & (b.log_r > 0)) | ((b.adv < 0) & (b.log_r < 0))


def _m2po(b: _Batch, p: Params, keep):
    if keep is not None:
        dropped = ~np.asarray(keep).astype(bool) & b.mask
    else:
        trust = _trust_region(b)
        m2 = np.where(trust, b.log_r, 0).astype(b.log_r.dtype) ** 2
        dropped = m2po_dropped(m2, int(trust.sum()), p.tau_m2)
    ratio = np.where(dropped, 0, np.exp(b.log_r)).astype(b.log_r.dtype)
    return ratio * b.adv, _none(b).mask(dropped)


def m2po_dropped(m2: np.ndarray, n: int, tau: float) -> np.ndarray:
    """M2PO's Algorithm 1 (remove the largest M2 while the trust region's mean M2 exceeds tau), given
    M2 on the n trust-region tokens (0 elsewhere): the removed tokens, equal values lowest flat index
    first. The stopping rule "sum of what is left <= tau x count left" is decided exactly."""
    dropped = np.zeros(m2.shape, dtype=bool)
    flat = m2.reshape(-1)
    where = np.flatnonzero(flat > 0)  # a value of 0 never needs removing
    values = flat[where].astype(np.float64)  # exact: float64 holds every float32 and float16
    order = np.lexsort((where, -values))  # largest first, then the lowest index
    values, where = values[order], where[order]

    def holds(k: int) -> bool:  # after removing the k largest, the mean of the n - k left is <= tau
        if k >= n:
            return True
        bound, parts = Fraction(tau) * (n - k), []
        while bound != 0:  # tau (n - k) as a sum of floats, exactly
            parts.append(float(bound))
            if parts[-1] == 0.0:
                break
            bound -= Fraction(parts[-1])
        return math.fsum([*values[k:].tolist(), *(-part for part in parts)]) <= 0.0  # fsum: exact sign

    prefix = np.concatenate([[0.0], np.cumsum(values)])
    left = n - np.arange(values.size + 1, dtype=np.float64)
    k = int(np.argmax((prefix[-1] - prefix) <= tau * left))  # the float guess; holds at k = values.size
    while k > 0 and holds(k - 1):
        k -= 1
    while not holds(k):
        k += 1
    dropped.reshape(-1)[where[:k]] = True
    return dropped


def _solve_cap_tau(delta_sq: np.ndarray, budget: float) -> float | None:
    """m2po_cap's tau, as its released code solves it (see trainer/algo/objectives.py _solve_cap_tau)."""
    n = delta_sq.size
    if n == 0:
        return None
    total = float(delta_sq.sum(dtype=np.float64))
    target = budget * n
    if total / n <= budget + 1e-12 or target >= total - 1e-12:
        return None
    if target <= 1e-12:
        return 0.0
    values = np.sort(delta_sq).astype(np.float64)
    csum = np.cumsum(values)
    rest = np.arange(n - 1, -1, -1, dtype=np.float64)
    reached = np.flatnonzero((values - 1e-12) * rest + csum >= target - 1e-12)
    if reached.size == 0:
        return None
    k = int(reached[0])
    return 0.0 if k == 0 else math.sqrt(max(float(values[k - 1]) - 1e-12, 0.0))


def _m2po_cap(b: _Batch, p: Params, keep):
    trust = _trust_region(b)
    m2 = np.where(trust, b.log_r, 0).astype(b.log_r.dtype) ** 2
    tau = _solve_cap_tau(m2[trust], p.budget)
    ratio = np.exp(b.log_r)
    if tau is None:
        return ratio * b.adv, _none(b)
    j, clipped = _ppo_clip(ratio, b.adv, math.exp(-tau), math.exp(tau))
    return j, _none(b).clip(clipped)


def _grpo(b: _Batch, p: Params, keep):
    j, clipped = _ppo_clip(np.exp(b.log_r), b.adv, 1.0 - p.eps_low, 1.0 + p.eps_high)
    return j, _none(b).clip(clipped)


def _no_clip(b: _Batch, p: Params, keep):
    return np.exp(b.log_r) * b.adv, _none(b)


def _gspo(b: _Batch, p: Params, keep):
    lengths = np.maximum(b.mask.sum(axis=1), 1).astype(b.log_r.dtype)
    ratio = np.exp(b.log_r.sum(axis=1) / lengths)[:, None]  # the sequence's geometric-mean ratio
    j, clipped = _ppo_clip(np.broadcast_to(ratio, b.log_r.shape), b.adv, 1.0 - p.eps_low, 1.0 + p.eps_high)
    return j, _none(b).clip(clipped)


def _decoupled_ppo(b: _Batch, p: Params, keep):
    ratio = np.exp(np.where(b.mask, b.logp - b.prox, 0).astype(b.log_r.dtype))
    behav_weight = np.exp(np.where(b.mask, b.prox - b.behav, 0).astype(b.log_r.dtype))
    j, clipped = _ppo_clip(ratio, b.adv, 1.0 - p.eps_low, 1.0 + p.eps_high)
    return behav_weight * j, _none(b).clip(clipped)


def _cispo(b: _Batch, p: Params, keep):
    ratio = np.exp(b.log_r)
    low, high = 1.0 - p.eps_low, 1.0 + p.eps_high
    truncated = b.mask & (b.adv != 0) & ((ratio < low) | (ratio > high))
    return np.clip(ratio, low, high) * b.adv * np.where(b.mask, b.logp, 0), _none(b).reweight(truncated)


def _sapo(b: _Batch, p: Params, keep):
    ratio = np.exp(b.log_r)
    tau = np.where(b.adv > 0, p.sapo_tau_pos, p.sapo_tau_neg).astype(b.log_r.dtype)
    gate = 1.0 / (1.0 + np.exp(-(tau * (ratio - 1.0))))
    g = 4.0 * gate * (1.0 - gate)
    halved = b.mask & (b.adv != 0) & (g <= SAPO_REWEIGHTED_BELOW)
    return (4.0 / tau) * gate * b.adv, _none(b).reweight(halved)


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
MARKED_OBJECTIVES = tuple(_SURROGATES)  # the trainer's objectives (a test holds the two lists equal)


# ---------------------------------------------------------------------------------------------
# Samples: the marks of a logged batch, as docs/SAMPLES.md stores them
# ---------------------------------------------------------------------------------------------

OPTION_ORDER = ("dual_clip", "token_mask", "seq_mask", "tis", "sq_penalty")  # as variant names list them
MARKING_OPTIONS = {  # the options a counterfactual switches on, at the run's own thresholds
    "dual_clip": {"dual_clip_c": 3.0},
    "token_mask": {"token_mask": True},
    "seq_mask": {"seq_mask": True},
}


def options_on(objective: str, params: dict) -> tuple[str, ...]:
    on = {
        "dual_clip": params.get("dual_clip_c") is not None and objective not in ("cispo", "sapo"),
        "token_mask": bool(params.get("token_mask")),
        "seq_mask": bool(params.get("seq_mask")),
        "tis": params.get("tis_cap") is not None,
        "sq_penalty": bool(params.get("sq_log_ratio_coef") or 0),
    }
    return tuple(option for option in OPTION_ORDER if on[option])


def variant_name(objective: str, options) -> str:
    return "+".join([objective, *(option for option in OPTION_ORDER if option in set(options))])


def _padded(rows: list, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    width = max((len(row) for row in rows), default=0)
    values = np.zeros((len(rows), width), dtype=dtype)
    mask = np.zeros((len(rows), width), dtype=bool)
    for i, row in enumerate(rows):
        values[i, : len(row)] = row
        mask[i, : len(row)] = True
    return values, mask


def _indices(row: np.ndarray, length: int) -> list[int]:
    return np.flatnonzero(row[:length]).tolist()


def samples_marks(
    objective: str,
    logp: list,
    behav_logp: list,
    advantages: list,
    *,
    rollout_logp: list | None = None,
    **params,
) -> list[dict]:
    """The correction fields of a batch of logged samples (one row per sample, per-token log-probs
    of the current and of the behaviour policy, one advantage per sample): for each sample its
    log_ratio, the run's own variant and its masked/clipped/reweighted token indices, and what every
    other objective (at the same options) and each marking option left off would have done to the
    same tokens (`counterfactual`). M2PO's mask is taken over the whole batch, as its loss takes it."""
    if not (len(logp) == len(behav_logp) == len(advantages)):
        raise ValueError("behav_logp, advantages: one entry per sample, as many as logp")
    lengths = [len(row) for row in logp]
    if [len(row) for row in behav_logp] != lengths:
        raise ValueError("behav_logp: each sample needs as many log-probs as its logp")
    current, mask = _padded(logp)
    behaviour, _ = _padded(behav_logp)
    engine = None
    if rollout_logp is not None:
        if [len(row) for row in rollout_logp] != lengths:
            raise ValueError("rollout_logp: each sample needs as many log-probs as its logp")
        engine, _ = _padded(rollout_logp)
    adv = np.asarray([float(a) for a in advantages], dtype=np.float64)
    own_options = options_on(objective, params)
    variants = {variant_name(objective, own_options): (objective, params)}
    shared = {k: v for k, v in params.items() if k not in ("tau_m2", "budget", "eps_low", "eps_high")}
    for other in MARKED_OBJECTIVES:
        if other in (objective, "decoupled_ppo"):  # decoupled_ppo needs a proximal policy's log-probs
            continue
        other_params = {k: v for k, v in shared.items() if not (k == "dual_clip_c" and other in ("cispo", "sapo"))}
        variants.setdefault(variant_name(other, options_on(other, other_params)), (other, other_params))
    for option, switch in MARKING_OPTIONS.items():
        if option not in own_options and not (option == "dual_clip" and objective in ("cispo", "sapo")):
            variants.setdefault(variant_name(objective, (*own_options, option)), (objective, {**params, **switch}))
    marked = {
        name: token_marks(chosen, current, behaviour, adv, mask, rollout_logp=engine, **_markable(chosen_params))
        for name, (chosen, chosen_params) in variants.items()
    }
    own_name = next(iter(variants))
    log_ratio = np.where(mask, current - behaviour, 0.0)
    out = []
    for i, length in enumerate(lengths):
        own = marked[own_name]
        out.append(
            {
                "objective": objective,
                "variant": own_name,
                "advantage": float(adv[i]),
                "log_ratio": [round(float(v), 6) for v in log_ratio[i, :length]],
                "masked": _indices(own.masked[i], length),
                "clipped": _indices(own.clipped[i], length),
                "reweighted": _indices(own.reweighted[i], length),
                "counterfactual": {
                    name: {kind: _indices(getattr(m, kind)[i], length) for kind in ("masked", "clipped", "reweighted")}
                    for name, m in marked.items()
                    if name != own_name
                },
            }
        )
    return out


def _markable(params: dict) -> dict:
    """The parameters token_marks takes (a run's config may hold others, such as its learning rate)."""
    known = set(Params.__dataclass_fields__)
    return {k: v for k, v in params.items() if k in known}
