"""The correction lab's objectives and options against a literal reference, token by token.

The reference walks the tokens in plain Python floats and writes each correction as its paper or
reference code states it (trainer/algo/objectives.py cites them): the per-token objective j, its
derivative d j / d log pi in closed form (not autograd: CISPO's gradient is by design not its
value's), and the mark (masked / clipped / reweighted, masked first). Only the exponentials are
taken from torch, so that a decision right at a bound is made on the same float on both sides.
Loss, gradient, marks and stats must all agree on at least 100 random batches per case.
"""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer.algo.objectives import AGG_MODES, DUAL_CLIP_OBJECTIVES, OBJECTIVES, policy_loss, policy_loss_marked

from .test_objectives import batches, ref_cap_tau, ref_m2po_keep, ref_trust_region

F64 = torch.float64
HUNDRED = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------
# The reference
# ---------------------------------------------------------------------------------------------


def _exp(values):
    return torch.exp(values).tolist()


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def _clip_term(ratio, a, low, high):
    """PPO's min(ratio A, clip(ratio) A): (value, clipped?)."""
    unclipped, clipped = ratio * a, min(max(ratio, low), high) * a
    return (clipped, True) if clipped < unclipped else (unclipped, False)


def reference(name, logp, behav, adv, mask, prox=None, rollout=None, **p):
    """(loss, grad, marks, stats) of objective `name` with options `p`, token by token."""
    rows, cols = logp.shape
    log_r = (logp - behav).masked_fill(~mask, 0.0)
    lr, r, a, m, lp = log_r.tolist(), _exp(log_r), adv.masked_fill(~mask, 0.0).tolist(), mask.tolist(), logp.tolist()
    eps_low = p.get("eps_low", {"gspo": 3e-4, "cispo": 1.0}.get(name, 0.2))
    eps_high = p.get("eps_high", 4e-4 if name == "gspo" else 0.2)
    low, high = 1.0 - eps_low, 1.0 + eps_high
    j = [[0.0] * cols for _ in range(rows)]
    dj = [[0.0] * cols for _ in range(rows)]
    mark = [[None] * cols for _ in range(rows)]  # "masked" | "clipped" | "reweighted" | None

    # --- the objective ---
    keep = ref_m2po_keep(log_r, adv, mask, p.get("tau_m2", 0.04)).tolist() if name == "m2po" else None
    cap_tau = None
    if name == "m2po_cap":
        cap_tau = ref_cap_tau((log_r[ref_trust_region(log_r, adv, mask)] ** 2).tolist(), p.get("budget", 0.04))
    u = _exp((logp - prox).masked_fill(~mask, 0.0)) if name == "decoupled_ppo" else None
    w_prox = _exp((prox - behav).masked_fill(~mask, 0.0)) if name == "decoupled_ppo" else None
    for i in range(rows):
        n_i = sum(m[i])
        s_i = math.exp(sum(lr[i][t] for t in range(cols) if m[i][t]) / max(n_i, 1)) if name == "gspo" else None
        for t in range(cols):
            if not m[i][t]:
                continue
            ri, ai = r[i][t], a[i][t]
            if name == "m2po":
                j[i][t], dj[i][t] = (ri * ai, ri * ai) if keep[i][t] else (0.0, 0.0)
                mark[i][t] = None if keep[i][t] else "masked"
            elif name in ("m2po_cap", "grpo"):
                if name == "m2po_cap" and cap_tau is None:
                    j[i][t], dj[i][t] = ri * ai, ri * ai
                    continue
                lo, hi = (math.exp(-cap_tau), math.exp(cap_tau)) if name == "m2po_cap" else (low, high)
                j[i][t], was_clipped = _clip_term(ri, ai, lo, hi)
                dj[i][t] = 0.0 if was_clipped else ri * ai
                mark[i][t] = "clipped" if was_clipped else None
            elif name == "no_clip":
                j[i][t], dj[i][t] = ri * ai, ri * ai
            elif name == "gspo":
                j[i][t], was_clipped = _clip_term(s_i, ai, low, high)
                dj[i][t] = 0.0 if was_clipped else s_i * ai  # GSPO-token: d s_{i,t} / d log pi_t = s_i
                mark[i][t] = "clipped" if was_clipped else None
            elif name == "decoupled_ppo":
                value, was_clipped = _clip_term(u[i][t], ai, low, high)
                j[i][t], dj[i][t] = w_prox[i][t] * value, 0.0 if was_clipped else w_prox[i][t] * u[i][t] * ai
                mark[i][t] = "clipped" if was_clipped else None
            elif name == "cispo":  # sg(clip(r)) A log pi
                weight = min(max(ri, low), high)
                j[i][t], dj[i][t] = weight * ai * lp[i][t], weight * ai
                mark[i][t] = "reweighted" if ai != 0 and (ri < low or ri > high) else None
            elif name == "sapo":  # (4 / tau) sigmoid(tau (r - 1)) A
                tau = p.get("sapo_tau_pos", 1.0) if ai > 0 else p.get("sapo_tau_neg", 1.05)
                gate = _sigmoid(tau * (ri - 1.0))
                j[i][t], dj[i][t] = 4.0 / tau * gate * ai, 4.0 * gate * (1.0 - gate) * ri * ai
                mark[i][t] = "reweighted" if ai != 0 and 4.0 * gate * (1.0 - gate) <= 0.5 else None

    def set_mark(i, t, kind):
        order = {None: 0, "reweighted": 1, "clipped": 2, "masked": 3}
        if order[kind] > order[mark[i][t]]:
            mark[i][t] = kind

    stats = {
        "actor/dual_clip_frac": 0.0,
        "actor/token_mask_frac": 0.0,
        "actor/seq_mask_frac": 0.0,
        "actor/sq_log_ratio_penalty": 0.0,
    }
    n_valid = sum(map(sum, m))
    # --- the options, in order ---
    c = p.get("dual_clip_c")
    if c is not None:  # where A < 0: j = max(j, c A)
        hits = 0
        for i, t in _valid(m):
            if a[i][t] < 0 and c * a[i][t] > j[i][t]:
                j[i][t], dj[i][t] = c * a[i][t], 0.0
                set_mark(i, t, "clipped")
                hits += 1
        stats["actor/dual_clip_frac"] = hits / max(n_valid, 1)
    engine_lr = (behav - rollout).masked_fill(~mask, 0.0) if rollout is not None else None
    if p.get("token_mask"):
        rho = r if p.get("token_mask_ref", "behaviour") == "behaviour" else _exp(engine_lr)
        hits = 0
        for i, t in _valid(m):
            if rho[i][t] < p.get("token_mask_low", 0.5) or rho[i][t] > p.get("token_mask_high", 5.0):
                j[i][t], dj[i][t] = 0.0, 0.0
                mark[i][t] = "masked"
                hits += 1
        stats["actor/token_mask_frac"] = hits / max(n_valid, 1)
    if p.get("seq_mask"):
        log_rho = lr if p.get("seq_mask_ref", "behaviour") == "behaviour" else engine_lr.tolist()
        s_high = p.get("seq_mask_high", 1.001)
        s_low = p.get("seq_mask_low") or 1.0 / s_high
        out, nonempty = 0, 0
        for i in range(rows):
            n_i = sum(m[i])
            if not n_i:
                continue
            nonempty += 1
            geo = math.exp(sum(log_rho[i][t] for t in range(cols) if m[i][t]) / n_i)
            if geo < s_low or geo > s_high:
                out += 1
                for t in range(cols):
                    if m[i][t]:
                        j[i][t], dj[i][t] = 0.0, 0.0
                        mark[i][t] = "masked"
        stats["actor/seq_mask_frac"] = out / max(nonempty, 1)
    cap = p.get("tis_cap")
    if cap is not None:  # min(pi_behav / pi_engine, C)
        engine_ratio = _exp(engine_lr)
        for i, t in _valid(m):
            j[i][t] *= min(engine_ratio[i][t], cap)
            dj[i][t] *= min(engine_ratio[i][t], cap)
            if engine_ratio[i][t] > cap and a[i][t] != 0 and mark[i][t] is None:
                mark[i][t] = "reweighted"

    # --- aggregation: loss = -sum_t w_t j_t + beta sum_t w_t (log r_t)^2 ---
    agg = p.get("agg") or ("seq-mean-token-mean" if name == "gspo" else "token-mean")
    weight = [[0.0] * cols for _ in range(rows)]
    nonempty = sum(1 for i in range(rows) if any(m[i]))
    for i, t in _valid(m):
        if agg == "token-mean":
            weight[i][t] = 1.0 / n_valid
        elif agg == "seq-mean-token-mean":
            weight[i][t] = 1.0 / (nonempty * sum(m[i]))
        else:
            weight[i][t] = 1.0 / (rows * (p.get("max_response_len") or cols))
    beta = p.get("sq_log_ratio_coef", 0.0)
    penalty = beta * sum(weight[i][t] * lr[i][t] ** 2 for i, t in _valid(m))
    loss = -sum(weight[i][t] * j[i][t] for i, t in _valid(m)) + penalty
    grad = [[-weight[i][t] * dj[i][t] + 2 * beta * weight[i][t] * lr[i][t] for t in range(cols)] for i in range(rows)]
    if beta:
        stats["actor/sq_log_ratio_penalty"] = penalty

    kinds = {k: {(i, t) for i, t in _valid(m) if mark[i][t] == k} for k in ("masked", "clipped", "reweighted")}
    none = kinds["masked"] | kinds["clipped"]
    denom = max(n_valid, 1)
    stats.update(
        {
            "actor/pg_loss": loss,
            "actor/clip_frac": len(none) / denom,
            "actor/clip_frac_low": sum(1 for i, t in none if a[i][t] < 0) / denom,
            "actor/clip_frac_high": sum(1 for i, t in none if a[i][t] > 0) / denom,
            **{f"actor/{k}_frac": len(v) / denom for k, v in kinds.items()},
        }
    )
    return loss, torch.tensor(grad, dtype=F64), kinds, stats


def _valid(m):
    return [(i, t) for i in range(len(m)) for t in range(len(m[i])) if m[i][t]]


def _marks_as_sets(marks):
    return {
        k: {tuple(x) for x in torch.nonzero(getattr(marks, k)).tolist()} for k in ("masked", "clipped", "reweighted")
    }


def check(name, batch, **p):
    """The implementation against the reference: loss, gradient, marks and stats."""
    logp = batch["logp"].clone().requires_grad_(True)
    extra = {k: batch[k] for k in ("prox_logp", "rollout_logp") if k in batch}
    loss, stats, marks = policy_loss_marked(name, logp, batch["behav"], batch["adv"], batch["mask"], **extra, **p)
    (grad,) = torch.autograd.grad(loss, logp)
    ref_loss, ref_grad, ref_marks, ref_stats = reference(
        name,
        batch["logp"],
        batch["behav"],
        batch["adv"],
        batch["mask"],
        batch.get("prox_logp"),
        batch.get("rollout_logp"),
        **p,
    )
    assert _marks_as_sets(marks) == ref_marks
    torch.testing.assert_close(loss.detach(), torch.tensor(ref_loss, dtype=F64), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-12)
    assert {k: stats[k] for k in ref_stats} == pytest.approx(ref_stats, rel=1e-9, abs=1e-12)
    return stats, marks


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------


@st.composite
def full_batches(draw):
    """A batch with proximal and engine log-probs beside the behaviour ones."""
    batch = draw(batches())
    rows, cols = batch["logp"].shape
    shifts = st.lists(st.floats(-1.5, 1.5), min_size=rows * cols, max_size=rows * cols)
    batch["prox_logp"] = batch["behav"] + torch.tensor(draw(shifts), dtype=F64).reshape(rows, cols)
    batch["rollout_logp"] = batch["behav"] + torch.tensor(draw(shifts), dtype=F64).reshape(rows, cols)
    return batch


aggs = st.sampled_from(AGG_MODES)
clip_ranges = st.one_of(st.none(), st.sampled_from([0.1, 0.2, 0.28, 0.5]), st.floats(0.0, 0.9))


# ---------------------------------------------------------------------------------------------
# Objectives
# ---------------------------------------------------------------------------------------------


@HUNDRED
@given(batch=full_batches(), agg=aggs, eps_low=clip_ranges, eps_high=clip_ranges)
def test_cispo_matches_its_formula(batch, agg, eps_low, eps_high):
    p = {
        "agg": agg,
        **({"eps_low": eps_low} if eps_low is not None else {}),
        **({"eps_high": eps_high} if eps_high is not None else {}),
    }
    stats, marks = check("cispo", batch, **p)
    assert not (marks.masked | marks.clipped).any(), "CISPO never takes a token out of the gradient"


@HUNDRED
@given(batch=full_batches(), agg=aggs, tau_pos=st.floats(0.05, 8.0), tau_neg=st.floats(0.05, 8.0))
def test_sapo_matches_its_formula(batch, agg, tau_pos, tau_neg):
    stats, marks = check("sapo", batch, agg=agg, sapo_tau_pos=tau_pos, sapo_tau_neg=tau_neg)
    assert not (marks.masked | marks.clipped).any()


def test_sapo_defaults_are_the_papers_and_its_gradient_weight_is_one_on_policy():
    behav = torch.full((1, 2), -1.0, dtype=F64)
    logp = behav.clone().requires_grad_(True)  # r = 1
    adv = torch.tensor([[1.0, -1.0]], dtype=F64)
    loss, _ = policy_loss("sapo", logp, behav, adv, torch.ones(1, 2, dtype=torch.bool))
    (grad,) = torch.autograd.grad(loss, logp)
    # f(1) = (4 / tau) sigmoid(0) = 2 / tau; d f / d log pi = 4 sigma (1 - sigma) r = 1 at r = 1
    assert loss.item() == pytest.approx(-(2 / 1.0 - 2 / 1.05) / 2)
    torch.testing.assert_close(grad, -adv / 2)


# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------

dual_cs = st.one_of(st.sampled_from([3.0, 1.5, 10.0]), st.floats(1.01, 50.0))


@HUNDRED
@pytest.mark.parametrize("name", DUAL_CLIP_OBJECTIVES)
@given(batch=full_batches(), c=dual_cs, agg=aggs)
def test_dual_clip_matches_its_formula(name, batch, c, agg):
    stats, marks = check(name, batch, dual_clip_c=c, agg=agg)


@HUNDRED
@pytest.mark.parametrize("ref", ["behaviour", "engine"])
@given(batch=full_batches(), name=st.sampled_from(OBJECTIVES), low=st.floats(0.05, 1.0), width=st.floats(0.0, 20.0))
def test_token_mask_matches_its_formula(ref, batch, name, low, width):
    check(name, batch, token_mask=True, token_mask_ref=ref, token_mask_low=low, token_mask_high=low + width)


@HUNDRED
@pytest.mark.parametrize("ref", ["behaviour", "engine"])
@given(
    batch=full_batches(),
    name=st.sampled_from(OBJECTIVES),
    high=st.floats(1.0001, 3.0),
    low=st.one_of(st.none(), st.floats(0.3, 1.0)),
)
def test_seq_mask_matches_its_formula(ref, batch, name, high, low):
    check(name, batch, seq_mask=True, seq_mask_ref=ref, seq_mask_high=high, seq_mask_low=low)


@HUNDRED
@given(
    batch=full_batches(),
    name=st.sampled_from(OBJECTIVES),
    beta=st.one_of(st.sampled_from([1e-3, 0.1]), st.floats(0.0, 10.0)),
    agg=aggs,
)
def test_squared_log_ratio_penalty_matches_its_formula(batch, name, beta, agg):
    check(name, batch, sq_log_ratio_coef=beta, agg=agg)


@HUNDRED
@given(batch=full_batches(), name=st.sampled_from(OBJECTIVES), data=st.data())
def test_every_option_together_matches_the_reference(batch, name, data):
    p = {"agg": data.draw(aggs)}
    if name in DUAL_CLIP_OBJECTIVES and data.draw(st.booleans()):
        p["dual_clip_c"] = data.draw(dual_cs)
    if data.draw(st.booleans()):
        p.update(token_mask=True, token_mask_ref=data.draw(st.sampled_from(["behaviour", "engine"])))
    if data.draw(st.booleans()):
        p.update(
            seq_mask=True,
            seq_mask_ref=data.draw(st.sampled_from(["behaviour", "engine"])),
            seq_mask_high=data.draw(st.floats(1.001, 2.0)),
        )
    if data.draw(st.booleans()):
        p["tis_cap"] = data.draw(st.sampled_from([2.0, 1.0, 0.5]))
    if data.draw(st.booleans()):
        p["sq_log_ratio_coef"] = data.draw(st.floats(0.0, 1.0))
    check(name, batch, **p)


def test_dual_clip_is_off_by_default_and_m2po_stays_the_papers():
    g = torch.Generator().manual_seed(2)
    behav = -torch.rand(4, 16, generator=g, dtype=F64)
    logp = behav + 2.0 * torch.randn(4, 16, generator=g, dtype=F64)  # many A < 0, r > 3 tokens
    adv = torch.tensor([1.0, -1.0, -0.5, 2.0], dtype=F64)[:, None].expand(4, 16)
    mask = torch.ones(4, 16, dtype=torch.bool)
    plain, stats = policy_loss("m2po", logp, behav, adv, mask)
    assert stats["actor/dual_clip_frac"] == 0.0
    assert torch.equal(plain, policy_loss("m2po", logp, behav, adv, mask, dual_clip_c=None)[0])
    assert not torch.equal(plain, policy_loss("m2po", logp, behav, adv, mask, dual_clip_c=3.0)[0])


@pytest.mark.parametrize(
    "name, params, field",
    [
        ("m2po", {"dual_clip_c": 1.0}, "dual_clip_c"),
        ("grpo", {"dual_clip_c": math.inf}, "dual_clip_c"),
        ("cispo", {"dual_clip_c": 3.0}, "dual_clip_c"),
        ("sapo", {"dual_clip_c": 3.0}, "dual_clip_c"),
        ("m2po", {"token_mask": True, "token_mask_ref": "sampler"}, "token_mask_ref"),
        ("m2po", {"token_mask": True, "token_mask_ref": "engine"}, "rollout_logp"),
        ("m2po", {"seq_mask": True, "seq_mask_ref": "engine"}, "rollout_logp"),
        ("m2po", {"token_mask": True, "token_mask_low": 2.0, "token_mask_high": 1.5}, "token_mask_low"),
        ("m2po", {"seq_mask": True, "seq_mask_high": 0.5}, "seq_mask_low"),
        ("m2po", {"token_mask_high": 0.0}, "token_mask_high"),
        ("m2po", {"sq_log_ratio_coef": -1.0}, "sq_log_ratio_coef"),
        ("sapo", {"sapo_tau_neg": 0.0}, "sapo_tau_neg"),
        ("cispo", {"eps_low": 1.5}, "eps_low"),
    ],
)
def test_bad_option_values_name_the_field(name, params, field):
    zeros = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=f"^{field}: "):
        policy_loss(name, zeros.clone().requires_grad_(True), zeros, torch.ones(2, 3), torch.ones(2, 3), **params)


def test_seq_mask_by_hand_with_its_default_lower_bound_and_the_engine_reference():
    # Geometric means of pi_behav / pi_engine per sequence: exp(mean log rho) = 1.0015, 0.9989, 0.9995.
    # high 1.002, low = 1 / 1.002 = 0.998004: all three kept; high 1.001 (low 0.999001): the first two go.
    behav = torch.zeros(3, 2, dtype=F64)
    engine = -torch.tensor([[0.001, 0.002], [-0.0011, -0.0011], [-0.0005, -0.0005]], dtype=F64)
    logp = torch.full((3, 2), 0.01, dtype=F64)
    adv = torch.ones(3, 2, dtype=F64)
    mask = torch.ones(3, 2, dtype=torch.bool)
    common = {"seq_mask": True, "seq_mask_ref": "engine", "rollout_logp": engine}
    _, stats, marks = policy_loss_marked("no_clip", logp, behav, adv, mask, seq_mask_high=1.002, **common)
    assert not marks.masked.any() and stats["actor/seq_mask_frac"] == 0.0
    loss, stats, marks = policy_loss_marked("no_clip", logp, behav, adv, mask, seq_mask_high=1.001, **common)
    assert marks.masked.tolist() == [[True, True], [True, True], [False, False]]
    assert stats["actor/seq_mask_frac"] == pytest.approx(2 / 3)
    assert loss.item() == pytest.approx(-2 * math.exp(0.01) / 6)  # masked tokens stay in the normaliser
