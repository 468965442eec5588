"""Policy objectives against float64 references written here straight from each paper's formula.

M2PO's reference is Algorithm 1's literal while-loop, trainer/algo/m2po_algorithm1.py (shown in the fast
mask's docstring). Its condition "mean > tau" is evaluated in exact rational arithmetic on the float
M2 values: that is the implementation's promise, and a float mean would make the reference itself
depend on summation order (see test_mask_decides_the_mean_exactly).
"""

import dataclasses
import math
from fractions import Fraction

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer.algo import objectives
from trainer.algo.m2po_algorithm1 import m2po_keep_literal
from trainer.algo.objectives import (
    AGG_MODES,
    DUAL_CLIP_OBJECTIVES,
    OBJECTIVES,
    STATS_KEYS,
    check_loss_inputs,
    m2po_mask,
    policy_loss,
    policy_loss_checked,
    policy_loss_marked,
)

F64 = torch.float64
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------


def ref_trust_region(log_r, adv, mask):
    return mask & (((adv > 0) & (log_r > 0)) | ((adv < 0) & (log_r < 0)))


ref_m2po_keep = m2po_keep_literal  # Algorithm 1, literally (trainer/algo/m2po_algorithm1.py)


def ref_cap_tau(delta_sq, budget):
    """The released code's `kpo_clip_harmful_tokens` + `_solve_tau_from_sorted_delta2`, transcribed."""
    n = len(delta_sq)
    if n == 0 or sum(delta_sq) / n <= budget + 1e-12:
        return None
    values = sorted(delta_sq)
    target, total = budget * n, sum(values)
    if target >= total - 1e-12:
        return None
    if target <= 1e-12:
        return 0.0
    csum = 0.0
    for k in range(n):
        csum += values[k]
        if (values[k] - 1e-12) * (n - k - 1) + csum >= target - 1e-12:
            return 0.0 if k == 0 else math.sqrt(max(values[k - 1] - 1e-12, 0.0))
    return None


def ppo_min(r, adv, low, high):
    return torch.minimum(r * adv, r.clamp(low, high) * adv)


def ref_token_objective(name, logp, behav, adv, mask, prox=None, **p):
    """The per-token objective j (to maximise) of each objective, float64, from its formula."""
    log_r = logp - behav
    r = torch.exp(log_r)
    if name == "m2po":
        keep = ref_m2po_keep(log_r, adv, mask, p.get("tau_m2", 0.04))
        return torch.where(keep & mask, r * adv, 0.0)
    if name == "m2po_cap":
        trust = ref_trust_region(log_r, adv, mask)
        tau = ref_cap_tau((log_r[trust] ** 2).tolist(), p.get("budget", 0.04))
        return r * adv if tau is None else ppo_min(r, adv, math.exp(-tau), math.exp(tau))
    if name == "grpo":
        return ppo_min(r, adv, 1 - p.get("eps_low", 0.2), 1 + p.get("eps_high", 0.2))
    if name == "no_clip":
        return r * adv
    if name == "gspo":
        lengths = mask.sum(1, keepdim=True).clamp(min=1)
        s = torch.exp((log_r * mask).sum(1, keepdim=True) / lengths).expand_as(log_r)
        return ppo_min(s, adv, 1 - p.get("eps_low", 3e-4), 1 + p.get("eps_high", 4e-4))
    if name == "decoupled_ppo":
        u = torch.exp(logp - prox)
        return torch.exp(prox - behav) * ppo_min(u, adv, 1 - p.get("eps_low", 0.2), 1 + p.get("eps_high", 0.2))
    if name == "cispo":  # MiniMax-M1 eq. 4-5: sg(clip(r)) A log pi, no lower bound by default
        w = r.clamp(1 - p.get("eps_low", 1.0), 1 + p.get("eps_high", 0.2)).detach()
        return w * adv * torch.where(mask, logp, 0.0)
    if name == "sapo":  # SAPO: (4 / tau) sigmoid(tau (r - 1)) A, tau by the sign of A
        tau = torch.where(
            adv > 0,
            torch.tensor(p.get("sapo_tau_pos", 1.0), dtype=r.dtype),
            torch.tensor(p.get("sapo_tau_neg", 1.05), dtype=r.dtype),
        )
        return 4 / tau * torch.sigmoid(tau * (r - 1)) * adv
    raise AssertionError(name)


def ref_aggregate(j, mask, agg, max_response_len=None):
    j = torch.where(mask, j, 0.0)
    if agg == "token-mean":
        return j.sum() / max(int(mask.sum()), 1)
    if agg == "seq-mean-token-mean":
        means = [j[i].sum() / mask[i].sum() for i in range(len(j)) if mask[i].any()]
        return sum(means) / len(means) if means else torch.zeros((), dtype=j.dtype)
    return j.sum() / (j.shape[0] * (max_response_len or j.shape[1]))


def ref_loss(name, logp, behav, adv, mask, prox=None, agg=None, tis_cap=None, rollout=None, **p):
    j = ref_token_objective(name, logp, behav, adv, mask, prox, **p)
    if tis_cap is not None:
        j = j * torch.exp(behav - rollout).clamp(max=tis_cap)
    agg = agg or ("seq-mean-token-mean" if name == "gspo" else "token-mean")
    return -ref_aggregate(j, mask, agg, p.get("max_response_len"))


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

TIES = [0.0, 0.1, -0.1, 0.2, -0.2, 0.3, -0.3, 0.5, -0.5, 2.0, -2.0]
log_ratios = st.one_of(
    st.sampled_from(TIES),
    st.floats(-0.4, 0.4),
    st.builds(lambda sign, e: sign * 10.0**e, st.sampled_from([-1.0, 1.0]), st.floats(-8.0, 1.3)),  # heavy tail
)
advantage_values = st.one_of(st.sampled_from([-1.0, 0.0, 1.0, 0.5, -2.0]), st.floats(-3.0, 3.0))
taus = st.one_of(st.sampled_from([0.04, 1e-8, 1e-3, 0.09, 1.0, 1e3]), st.floats(1e-6, 10.0))


@st.composite
def batches(draw, max_rows=4, max_cols=12):
    rows = draw(st.integers(1, max_rows))
    cols = draw(st.integers(1, max_cols))
    log_r = torch.tensor(draw(st.lists(log_ratios, min_size=rows * cols, max_size=rows * cols)), dtype=F64)
    behav = torch.tensor(draw(st.lists(st.floats(-6.0, 0.0), min_size=rows * cols, max_size=rows * cols)))
    if draw(st.booleans()):  # GRPO: one advantage per sequence
        adv = torch.tensor(draw(st.lists(advantage_values, min_size=rows, max_size=rows)), dtype=F64)
        adv = adv[:, None].expand(rows, cols).contiguous()
    else:
        adv = torch.tensor(draw(st.lists(advantage_values, min_size=rows * cols, max_size=rows * cols)))
        adv = adv.to(F64).reshape(rows, cols)
    mask_kind = draw(st.sampled_from(["all", "none", "random", "padded"]))
    if mask_kind == "all":
        mask = torch.ones(rows, cols, dtype=torch.bool)
    elif mask_kind == "none":
        mask = torch.zeros(rows, cols, dtype=torch.bool)
    elif mask_kind == "random":
        mask = torch.tensor(draw(st.lists(st.booleans(), min_size=rows * cols, max_size=rows * cols)))
        mask = mask.reshape(rows, cols)
    else:
        lengths = torch.tensor(draw(st.lists(st.integers(0, cols), min_size=rows, max_size=rows)))
        mask = torch.arange(cols)[None, :] < lengths[:, None]
    behav = behav.to(F64).reshape(rows, cols)
    return {"logp": behav + log_r.reshape(rows, cols), "behav": behav, "adv": adv, "mask": mask}


# ---------------------------------------------------------------------------------------------
# The M2PO mask
# ---------------------------------------------------------------------------------------------


@PROPERTY
@given(batch=batches(), tau=taus)
def test_mask_equals_the_literal_greedy_loop(batch, tau):
    log_r = batch["logp"] - batch["behav"]
    keep = m2po_mask(log_r, batch["adv"], batch["mask"], tau)
    assert torch.equal(keep, ref_m2po_keep(log_r, batch["adv"], batch["mask"], tau))


@PROPERTY
@given(batch=batches(), tau=taus)
def test_mask_only_removes_trust_region_tokens_and_meets_tau(batch, tau):
    log_r = (batch["logp"] - batch["behav"]).masked_fill(~batch["mask"], 0.0)
    keep = m2po_mask(log_r, batch["adv"], batch["mask"], tau)
    trust = ref_trust_region(log_r, batch["adv"], batch["mask"])
    assert not (~keep & ~trust).any()
    remaining = (log_r[trust & keep] ** 2).tolist()
    if remaining:
        assert sum(map(Fraction, remaining)) <= Fraction(tau) * len(remaining)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", range(6))
def test_fast_mask_equals_the_literal_algorithm_1_on_random_batches(seed, dtype):
    """The fast mask against the paper's loop on random stale-looking batches: padding, advantages
    of both signs (and zero), heavy-tailed log-ratios, a tau that masks some tokens and not all."""
    gen = torch.Generator().manual_seed(seed)
    rows, cols = 3 + seed, 7 + 5 * seed
    log_r = ((0.4 * torch.randn(rows, cols, generator=gen, dtype=F64)) ** 3).to(dtype)
    adv = torch.randn(rows, 1, generator=gen, dtype=F64).round().expand(rows, cols).to(dtype)
    mask = torch.rand(rows, cols, generator=gen) > 0.2
    tau = float(torch.quantile((log_r.double() ** 2)[mask], 0.6))
    keep = m2po_mask(log_r, adv, mask, tau)
    assert 0 < int((~keep).sum()) < int(mask.sum()), "the batch should have some, not all, tokens masked"
    assert torch.equal(keep, m2po_keep_literal(log_r, adv, mask, tau))


def test_mask_float32_equals_the_loop():
    gen = torch.Generator().manual_seed(3)
    log_r = (0.3 * torch.randn(6, 50, generator=gen)) ** 3  # heavy-tailed, float32
    adv = torch.randn(6, 1, generator=gen).expand(6, 50)
    mask = torch.rand(6, 50, generator=gen) > 0.1
    keep = m2po_mask(log_r, adv, mask, 0.002)
    assert (~keep).sum() > 0
    assert torch.equal(keep, ref_m2po_keep(log_r, adv, mask, 0.002))


def test_mask_ties_remove_the_lowest_flat_index_first():
    # All A > 0 and r > 1: every token is in the trust region. M2 = 0.25, 0.25 | 0.25, 0.01.
    # Means: 0.76/4 = 0.19 > 0.15; drop one 0.25: 0.51/3 = 0.17 > 0.15; drop another: 0.26/2 = 0.13.
    log_r = torch.tensor([[0.5, 0.5], [0.5, 0.1]], dtype=F64)
    keep = m2po_mask(log_r, torch.ones(2, 2, dtype=F64), torch.ones(2, 2, dtype=torch.bool), 0.15)
    assert keep.tolist() == [[False, False], [True, True]]


def test_mask_decides_the_mean_exactly():
    # Three equal M2 values v with tau = v: the mean is exactly tau, so nothing is removed. A float
    # loop summing v + v + v gets 0.09000000000000001 > 0.09 and would wrongly remove one.
    log_r = torch.tensor([[0.3, 0.3, 0.3]], dtype=F64)
    tau = 0.3 * 0.3
    assert (tau + tau + tau) / 3 > tau  # the float pitfall this test guards against
    keep = m2po_mask(log_r, torch.ones(1, 3, dtype=F64), torch.ones(1, 3, dtype=torch.bool), tau)
    assert keep.all()
    # Mean exactly tau after one removal: (1 + 0.25 * 3) / 4 > 0.25, then 0.75 / 3 = 0.25: stop.
    log_r = torch.tensor([[1.0, 0.5, 0.5, 0.5]], dtype=F64)
    keep = m2po_mask(log_r, torch.ones(1, 4, dtype=F64), torch.ones(1, 4, dtype=torch.bool), 0.25)
    assert keep.tolist() == [[False, True, True, True]]


def test_mask_never_touches_tokens_outside_the_trust_region():
    # Huge ratios, but each on the side PPO's min never clips: A > 0 with r < 1, A < 0 with r > 1.
    log_r = torch.tensor([[-5.0, 5.0, 0.0]], dtype=F64)
    adv = torch.tensor([[1.0, -1.0, 1.0]], dtype=F64)
    assert m2po_mask(log_r, adv, torch.ones(1, 3, dtype=torch.bool), 1e-6).all()


def sorted_reference_keep(log_r, adv, mask, tau):
    """Algorithm 1 by one full sort and suffix means (float64); agrees with the loop away from ties
    with tau, and is fast enough for large inputs."""
    log_r = log_r.to(F64).masked_fill(~mask, 0.0)
    trust = ref_trust_region(log_r, adv, mask).flatten()
    idx = torch.nonzero(trust).squeeze(1)
    values = (log_r * log_r).flatten()[idx]
    order = torch.sort(values, descending=True, stable=True).indices
    idx, values = idx[order], values[order]
    n = values.numel()
    prefix = torch.cat([torch.zeros(1, dtype=F64), torch.cumsum(values, 0)])
    stops = (values.sum() - prefix) <= tau * (n - torch.arange(n + 1, dtype=F64))
    k = int(torch.nonzero(stops)[0])
    keep = torch.ones(log_r.numel(), dtype=torch.bool)
    keep[idx[:k]] = False
    return keep.reshape(log_r.shape)


@pytest.mark.parametrize("scale", [0.05, 0.14, 0.4, 3.0])
def test_mask_on_a_large_batch_matches_the_sorted_reference(scale):
    gen = torch.Generator().manual_seed(7)
    log_r = scale * torch.randn(256, 1024, generator=gen) ** 3  # float32, heavy-tailed
    adv = torch.randn(256, 1, generator=gen).expand(256, 1024)
    mask = torch.rand(256, 1024, generator=gen) > 0.1
    assert torch.equal(m2po_mask(log_r, adv, mask, 0.04), sorted_reference_keep(log_r, adv, mask, 0.04))


def test_mask_when_the_strided_sample_misleads_the_threshold_guess():
    # The first threshold comes from a strided sample (stride 5 at this size). The sampled tokens
    # hold M2 = 1e-4 and a hundred outliers with M2 = 1, so the guess is theta = 1; but half of the
    # unsampled tokens hold M2 = 0.25, below theta, and must go too: lower thresholds are needed.
    n = 1 << 18
    log_r = torch.full((1, n), 0.01)
    log_r[0, 1::2] = 0.5
    log_r[0, ::5] = 0.01
    log_r[0, :500:5] = 1.0
    adv = torch.ones(1, n)
    mask = torch.ones(1, n, dtype=torch.bool)
    keep = m2po_mask(log_r, adv, mask, 0.04)
    assert torch.equal(keep, sorted_reference_keep(log_r, adv, mask, 0.04))
    assert (~keep[0, 1::2]).sum() > 1000


# ---------------------------------------------------------------------------------------------
# Every objective against its formula
# ---------------------------------------------------------------------------------------------


def _call(name, batch, **p):
    logp = batch["logp"].clone().requires_grad_(True)
    if name == "decoupled_ppo":
        p.setdefault("prox_logp", batch["prox"])
    return policy_loss(name, logp, batch["behav"], batch["adv"], batch["mask"], **p)


def _with_prox(batch, data):
    rows, cols = batch["logp"].shape
    shift = torch.tensor(data.draw(st.lists(st.floats(-0.5, 0.5), min_size=rows * cols, max_size=rows * cols)))
    batch["prox"] = batch["behav"] + shift.to(F64).reshape(rows, cols)
    return batch


@FEW
@pytest.mark.parametrize("name", OBJECTIVES)
@given(batch=batches(), data=st.data())
def test_loss_matches_the_formula(name, batch, data):
    batch = _with_prox(batch, data)
    loss, stats = _call(name, batch)
    expected = ref_loss(name, batch["logp"], batch["behav"], batch["adv"], batch["mask"], batch.get("prox"))
    torch.testing.assert_close(loss.detach(), expected, rtol=1e-9, atol=1e-12)
    assert set(STATS_KEYS) <= set(stats) and all(isinstance(v, float) for v in stats.values())
    assert all(math.isfinite(v) for v in stats.values())


@FEW
@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("name", ["m2po", "grpo", "gspo"])
@given(batch=batches(), data=st.data())
def test_every_aggregation_matches_its_formula(name, agg, batch, data):
    max_len = data.draw(st.one_of(st.none(), st.integers(1, 64)))
    p = {"agg": agg, "max_response_len": max_len}
    loss, _ = _call(name, batch, **p)
    expected = ref_loss(name, batch["logp"], batch["behav"], batch["adv"], batch["mask"], **p)
    torch.testing.assert_close(loss.detach(), expected, rtol=1e-9, atol=1e-12)


@FEW
@pytest.mark.parametrize("name", OBJECTIVES)
@given(batch=batches(), data=st.data())
def test_truncated_importance_sampling_multiplies_by_the_capped_ratio(name, batch, data):
    batch = _with_prox(batch, data)
    rows, cols = batch["logp"].shape
    gap = torch.tensor(data.draw(st.lists(st.floats(-2.0, 2.0), min_size=rows * cols, max_size=rows * cols)))
    rollout = batch["behav"] + gap.to(F64).reshape(rows, cols)
    cap = data.draw(st.sampled_from([2.0, 1.0, 0.5, 10.0]))
    loss, _ = _call(name, batch, tis_cap=cap, rollout_logp=rollout)
    expected = ref_loss(
        name,
        batch["logp"],
        batch["behav"],
        batch["adv"],
        batch["mask"],
        batch.get("prox"),
        tis_cap=cap,
        rollout=rollout,
    )
    torch.testing.assert_close(loss.detach(), expected, rtol=1e-9, atol=1e-12)


@FEW
@given(batch=batches(), tau=taus)
def test_m2po_loss_with_any_tau(batch, tau):
    loss, stats = _call("m2po", batch, tau_m2=tau)
    expected = ref_loss("m2po", batch["logp"], batch["behav"], batch["adv"], batch["mask"], tau_m2=tau)
    torch.testing.assert_close(loss.detach(), expected, rtol=1e-9, atol=1e-12)
    keep = ref_m2po_keep(batch["logp"] - batch["behav"], batch["adv"], batch["mask"], tau)
    assert stats["actor/clip_frac"] == pytest.approx(int((~keep).sum()) / max(int(batch["mask"].sum()), 1))


def test_grpo_clip_higher_uses_the_asymmetric_bounds():
    logp = torch.log(torch.tensor([[1.25, 0.75]], dtype=F64)).requires_grad_(True)
    behav = torch.zeros(1, 2, dtype=F64)
    adv = torch.tensor([[1.0, -1.0]], dtype=F64)
    mask = torch.ones(1, 2, dtype=torch.bool)
    loss, stats = policy_loss("grpo", logp, behav, adv, mask, eps_low=0.2, eps_high=0.28)
    # r = 1.25 < 1.28 is not clipped; r = 0.75 < 0.8 with A < 0 is: min(-0.75, -0.8) = -0.8.
    assert loss.item() == pytest.approx(-(1.25 - 0.8) / 2)
    assert (stats["actor/clip_frac_low"], stats["actor/clip_frac_high"]) == (0.5, 0.0)


def test_gspo_equals_the_sequence_level_objective_and_its_gradient():
    gen = torch.Generator().manual_seed(5)
    behav = -torch.rand(4, 6, generator=gen, dtype=F64)
    logp = (behav + 3e-4 * torch.randn(4, 6, generator=gen, dtype=F64)).requires_grad_(True)
    adv = torch.tensor([1.0, -1.0, 0.5, -2.0], dtype=F64)[:, None].expand(4, 6)
    mask = torch.arange(6)[None, :] < torch.tensor([6, 4, 1, 5])[:, None]
    loss, _ = policy_loss("gspo", logp, behav, adv, mask)
    (grad,) = torch.autograd.grad(loss, logp)

    # GSPO: J = 1/G sum_i min(s_i A_i, clip(s_i, 1 - 3e-4, 1 + 4e-4) A_i), s_i = (pi/pi_old)^(1/|y_i|).
    ref_logp = logp.detach().clone().requires_grad_(True)
    s = torch.exp(((ref_logp - behav) * mask).sum(1) / mask.sum(1))
    a = adv[:, 0]
    ref = -torch.minimum(s * a, s.clamp(1 - 3e-4, 1 + 4e-4) * a).mean()
    (ref_grad,) = torch.autograd.grad(ref, ref_logp)
    torch.testing.assert_close(loss.detach(), ref.detach())
    torch.testing.assert_close(grad, ref_grad)


# ---------------------------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------------------------


def _gradcheck_inputs(seed=11):
    gen = torch.Generator().manual_seed(seed)
    behav = -torch.rand(3, 5, generator=gen, dtype=F64) * 2
    log_r = 0.35 * torch.randn(3, 5, generator=gen, dtype=F64)
    adv = torch.tensor([1.0, -0.7, 1.3], dtype=F64)[:, None].expand(3, 5).contiguous()
    mask = torch.arange(5)[None, :] < torch.tensor([5, 3, 4])[:, None]
    prox = behav + 0.1 * torch.randn(3, 5, generator=gen, dtype=F64)
    rollout = behav + 0.5 * torch.randn(3, 5, generator=gen, dtype=F64)
    return behav + log_r, behav, adv, mask, prox, rollout


@pytest.mark.parametrize("agg", AGG_MODES)
# m2po_cap: see the next test. cispo's gradient is by design not its value's derivative (the weight is
# a stop-gradient): test_corrections.py checks it against sg(w) A d log pi.
@pytest.mark.parametrize("name", [n for n in OBJECTIVES if n not in ("m2po_cap", "cispo")])
def test_gradcheck(name, agg):
    logp, behav, adv, mask, prox, rollout = _gradcheck_inputs()
    p = {"agg": agg, "tis_cap": 2.0, "rollout_logp": rollout}
    if name == "decoupled_ppo":
        p["prox_logp"] = prox
    if name == "gspo":
        # Keep the sequence ratios inside GSPO's narrow band, where gradients flow. GSPO-token's
        # gradient is the derivative of its value only when per-token weights are equal within a
        # sequence, so per-token TIS weights are left out here.
        logp = behav + 1e-4 * (logp - behav)
        del p["tis_cap"], p["rollout_logp"]
    if name == "m2po":  # a case that masks, away from any decision boundary
        assert (~m2po_mask(logp - behav, adv, mask, 0.04)).any()
    logp = logp.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda lp: policy_loss(name, lp, behav, adv, mask, **p)[0], (logp,))


def test_m2po_cap_gradient_treats_tau_as_a_constant():
    # The released code solves tau from the data and then clips with it as a constant; the token
    # that sets tau sits on the bound, so a finite difference (gradcheck) would see tau move with it.
    logp, behav, adv, mask, _, _ = _gradcheck_inputs()
    logp.requires_grad_(True)
    loss, stats = policy_loss("m2po_cap", logp, behav, adv, mask)
    (grad,) = torch.autograd.grad(loss, logp)
    tau = stats["actor/m2po_tau"]
    assert 0 < tau < 1
    r = torch.exp(logp.detach() - behav)
    clipped = mask & (((adv > 0) & (r > math.exp(tau))) | ((adv < 0) & (r < math.exp(-tau))))
    assert clipped.any()
    expected = torch.where(mask & ~clipped, -r * adv / mask.sum(), 0.0)
    torch.testing.assert_close(grad, expected)


def test_m2po_gradient_is_zero_on_masked_tokens_and_r_a_over_n_elsewhere():
    logp, behav, adv, mask, _, _ = _gradcheck_inputs()
    logp.requires_grad_(True)
    loss, _ = policy_loss("m2po", logp, behav, adv, mask)
    (grad,) = torch.autograd.grad(loss, logp)
    keep = m2po_mask(logp.detach() - behav, adv, mask, 0.04) & mask
    r = torch.exp(logp.detach() - behav)
    expected = torch.where(keep, -r * adv / mask.sum(), 0.0)  # d(-M r A / n)/d logp = -M r A / n
    torch.testing.assert_close(grad, expected)


# ---------------------------------------------------------------------------------------------
# Stats on hand-worked examples
# ---------------------------------------------------------------------------------------------


OPTION_STATS_OFF = dict.fromkeys(
    (
        "actor/masked_frac",
        "actor/clipped_frac",
        "actor/reweighted_frac",
        "actor/dual_clip_frac",
        "actor/token_mask_frac",
        "actor/seq_mask_frac",
        "actor/sq_log_ratio_penalty",
    ),
    0.0,
)


def test_m2po_stats_by_hand():
    # A = [1, 1, -1, 1], log r = [0.3, 0.1, -0.2, -0.4]. Trust region: tokens 0, 1, 2 (token 3 has
    # A > 0 with r < 1). Their M2: 0.09, 0.01, 0.04, mean 0.14/3 = 0.0467 > 0.04, so token 0 goes;
    # the rest average 0.025 <= 0.04.
    log_r = torch.tensor([[0.3, 0.1, -0.2, -0.4]], dtype=F64)
    behav = torch.full((1, 4), -1.0, dtype=F64)
    adv = torch.tensor([[1.0, 1.0, -1.0, 1.0]], dtype=F64)
    mask = torch.ones(1, 4, dtype=torch.bool)
    loss, stats = policy_loss("m2po", (behav + log_r).requires_grad_(True), behav, adv, mask)
    e = math.exp
    # J = (0 + e^0.1 - e^-0.2 + e^-0.4) / 4 over all 4 valid tokens, the masked one included.
    assert loss.item() == pytest.approx(-(e(0.1) - e(-0.2) + e(-0.4)) / 4)
    expected = {
        "actor/clip_frac": 0.25,
        "actor/clip_frac_low": 0.0,
        "actor/clip_frac_high": 0.25,
        **OPTION_STATS_OFF,
        "actor/masked_frac": 0.25,
        "actor/m2": 0.14 / 3,
        "actor/m2_after": 0.025,
        "actor/m2_all": (0.09 + 0.01 + 0.04 + 0.16) / 4,
        "actor/ppo_kl": -(0.3 + 0.1 - 0.2 - 0.4) / 4,
        "actor/ratio_mean": (e(0.3) + e(0.1) + e(-0.2) + e(-0.4)) / 4,
        "actor/ratio_min": e(-0.4),
        "actor/ratio_max": e(0.3),
        "actor/tr_frac": 0.75,
        "actor/m2po_tau": 0.04,
    }
    assert stats == pytest.approx({"actor/pg_loss": loss.item(), **expected})


def test_grpo_stats_by_hand_with_padding():
    # r = [1.5, 0.5, 1.1, 0.9 | pad], A = [1, -1, -1, 1]. Clipped: r = 1.5 (A > 0, above 1.2) and
    # r = 0.5 (A < 0, below 0.8). j = [1.2, -0.8, -1.1, 0.9], J = 0.2 / 4.
    r = torch.tensor([[1.5, 0.5, 1.1, 0.9, 7.0]], dtype=F64)
    behav = torch.full((1, 5), -0.5, dtype=F64)
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0, 5.0]], dtype=F64)
    mask = torch.tensor([[True, True, True, True, False]])
    loss, stats = policy_loss("grpo", (behav + torch.log(r)).requires_grad_(True), behav, adv, mask)
    assert loss.item() == pytest.approx(-0.05)
    lr = [math.log(x) for x in (1.5, 0.5, 1.1, 0.9)]
    expected = {
        "actor/clip_frac": 0.5,
        "actor/clip_frac_low": 0.25,
        "actor/clip_frac_high": 0.25,
        **OPTION_STATS_OFF,
        "actor/clipped_frac": 0.5,
        "actor/m2": (lr[0] ** 2 + lr[1] ** 2) / 2,  # trust region: tokens 0 and 1
        "actor/m2_after": 0.0,  # both clipped: no trust-region token keeps a gradient
        "actor/m2_all": sum(x * x for x in lr) / 4,
        "actor/ppo_kl": -sum(lr) / 4,
        "actor/ratio_mean": (1.5 + 0.5 + 1.1 + 0.9) / 4,
        "actor/ratio_min": 0.5,
        "actor/ratio_max": 1.5,
        "actor/tr_frac": 0.5,
        "actor/m2po_tau": 0.0,
    }
    assert stats == pytest.approx({"actor/pg_loss": -0.05, **expected})


def test_m2po_cap_follows_the_released_solver_by_hand():
    # Trust-region M2 = 0.01, 0.05, 0.25, budget 0.04: target 0.12 < total 0.31. Ascending, the
    # capped sums are 0.03, 0.11, then 0.31 >= 0.12 at k = 2, so tau = sqrt(0.05 - 1e-12): the
    # token with M2 = 0.05 sits just above tau and is clipped too, as in the released code.
    log_r = torch.tensor([[0.1, math.sqrt(0.05), 0.5]], dtype=F64)
    behav = torch.zeros(1, 3, dtype=F64)
    adv = torch.ones(1, 3, dtype=F64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    loss, stats = policy_loss("m2po_cap", log_r.clone().requires_grad_(True), behav, adv, mask)
    tau = math.sqrt(0.05 - 1e-12)
    assert stats["actor/m2po_tau"] == pytest.approx(tau, rel=1e-12)
    assert loss.item() == pytest.approx(-(math.exp(0.1) + 2 * math.exp(tau)) / 3)
    assert stats["actor/clip_frac"] == pytest.approx(2 / 3)
    assert stats["actor/m2_after"] == pytest.approx(0.01)


@pytest.mark.parametrize("seed", range(300))
def test_m2po_cap_solver_equals_the_released_one(seed):
    """The solver sorts only the M2 values at or above the budget (a stale batch's M2 is mostly
    tiny); tau must still be the released loop's over the whole sorted list, ties and edges included."""
    from trainer.algo.objectives import _solve_cap_tau

    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 400, (1,), generator=gen))
    budget = [0.04, 0.001, 1e-9, 0.3][seed % 4]
    kind = seed % 5
    if kind == 0:  # heavy tails: most values far below the budget, a few far above
        torch.manual_seed(seed)
        delta_sq = (0.14 * torch.distributions.StudentT(3.0).sample((n,))) ** 2
    elif kind == 1:  # ties, some exactly at the budget
        delta_sq = torch.tensor([0.01, budget, budget, 0.2])[torch.randint(0, 4, (n,), generator=gen)]
    elif kind == 2:  # everything just under the budget but one
        delta_sq = torch.full((n,), budget * 0.999999)
        delta_sq[-1] = 5.0
    else:
        delta_sq = torch.rand(n, generator=gen) * [0.01, 0.1, 1.0][seed % 3]
    delta_sq = delta_sq.to(torch.float32)
    expected = ref_cap_tau(delta_sq.double().tolist(), budget)
    got = _solve_cap_tau(delta_sq, budget)
    assert (got is None) == (expected is None), (got, expected)
    if expected is not None:
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_m2po_cap_sets_no_constraint_within_the_budget():
    log_r = torch.tensor([[0.1, -0.1, 0.15]], dtype=F64)
    adv = torch.tensor([[1.0, -1.0, 1.0]], dtype=F64)
    behav = torch.zeros(1, 3, dtype=F64)
    loss, stats = policy_loss("m2po_cap", log_r.clone(), behav, adv, torch.ones(1, 3, dtype=torch.bool))
    assert stats["actor/clip_frac"] == 0.0 and stats["actor/m2po_tau"] == 0.0
    assert loss.item() == pytest.approx(-(math.exp(0.1) - math.exp(-0.1) + math.exp(0.15)) / 3)


def test_decoupled_ppo_by_hand():
    # pi_prox / pi_behav = 2 on both tokens; u = pi_theta / pi_prox = [1.5, 1.1], A = 1:
    # j = 2 * [min(1.5, 1.2), 1.1] = [2.4, 2.2].
    behav = torch.log(torch.tensor([[0.1, 0.2]], dtype=F64))
    prox = behav + math.log(2.0)
    logp = prox + torch.log(torch.tensor([[1.5, 1.1]], dtype=F64))
    loss, stats = policy_loss(
        "decoupled_ppo",
        logp,
        behav,
        torch.ones(1, 2, dtype=F64),
        torch.ones(1, 2, dtype=torch.bool),
        prox_logp=prox,
    )
    assert loss.item() == pytest.approx(-2.3)
    assert stats["actor/clip_frac_high"] == 0.5


def test_empty_batch_gives_zero_loss_and_finite_stats():
    zeros = torch.zeros(2, 3, dtype=F64)
    for name in OBJECTIVES:
        extra = {"prox_logp": zeros} if name == "decoupled_ppo" else {}
        loss, stats = policy_loss(name, zeros.clone().requires_grad_(True), zeros, zeros, zeros.bool(), **extra)
        assert loss.item() == 0.0
        assert stats["actor/clip_frac"] == 0.0 and stats["actor/ratio_mean"] == 1.0


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


def _good():
    logp = torch.zeros(2, 3, requires_grad=True)
    return {"logp": logp, "behav_logp": torch.zeros(2, 3), "advantages": torch.ones(2, 3), "mask": torch.ones(2, 3)}


def test_unknown_objective_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"^name: .*m2po, m2po_cap, grpo, no_clip, gspo, decoupled_ppo"):
        policy_loss("ppo", **_good())


@pytest.mark.parametrize("field", ["behav_logp", "advantages", "mask"])
def test_mismatched_shapes_name_the_argument(field):
    args = _good()
    args[field] = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=f"^{field}: shape"):
        policy_loss("m2po", **args)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("field", ["logp", "behav_logp", "advantages"])
def test_nan_or_inf_names_the_argument(field, bad):
    args = _good()
    values = torch.zeros(2, 3)
    values[1, 2] = bad  # on a padding position too: it must not reach the loss
    args[field] = values.requires_grad_(field == "logp")
    args["mask"] = torch.tensor([[1, 1, 1], [1, 1, 0]])
    with pytest.raises(ValueError, match=f"^{field}: contains NaN or inf"):
        policy_loss("grpo", **args)


@pytest.mark.parametrize("field", ["prox_logp", "rollout_logp"])
def test_nan_in_optional_log_probs_names_the_argument(field):
    bad = torch.full((2, 3), math.nan)
    with pytest.raises(ValueError, match=f"^{field}: contains NaN or inf"):
        policy_loss(
            "decoupled_ppo",
            **_good(),
            prox_logp=bad if field == "prox_logp" else torch.zeros(2, 3),
            **({"tis_cap": 2.0, "rollout_logp": bad} if field == "rollout_logp" else {}),
        )


@pytest.mark.parametrize("tau", [0.0, -0.04, math.nan, math.inf])
def test_tau_must_be_positive(tau):
    with pytest.raises(ValueError, match="^tau_m2: must be"):
        policy_loss("m2po", **_good(), tau_m2=tau)
    with pytest.raises(ValueError, match="^tau: must be"):
        m2po_mask(torch.zeros(2, 3), torch.ones(2, 3), torch.ones(2, 3), tau)


@pytest.mark.parametrize(
    "params, field",
    [
        ({"budget": 0.0}, "budget"),
        ({"eps_low": -0.1}, "eps_low"),
        ({"eps_low": 1.0}, "eps_low"),
        ({"eps_high": math.nan}, "eps_high"),
        ({"agg": "token-sum"}, "agg"),
        ({"max_response_len": 0}, "max_response_len"),
        ({"tis_cap": 2.0}, "rollout_logp"),
        ({"tis_cap": 0.0, "rollout_logp": torch.zeros(2, 3)}, "tis_cap"),
        ({"tau": 0.04}, "tau"),
    ],
)
def test_bad_parameters_name_the_field(params, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        policy_loss("m2po", **_good(), **params)


def test_decoupled_ppo_needs_the_proximal_log_probs():
    with pytest.raises(ValueError, match="^prox_logp: required"):
        policy_loss("decoupled_ppo", **_good())


def test_mask_must_be_boolean_or_zero_one():
    args = _good()
    args["mask"] = torch.full((2, 3), 0.5)
    with pytest.raises(ValueError, match="^mask: "):
        policy_loss("m2po", **args)


def test_dtype_mismatch_names_the_argument():
    args = _good()
    args["behav_logp"] = torch.zeros(2, 3, dtype=F64)
    with pytest.raises(ValueError, match="^behav_logp: dtype"):
        policy_loss("m2po", **args)


def test_overflowing_ratio_is_reported_not_returned_as_nan():
    # log r = 800 overflows float64's exp; with A = 0 the product would be inf * 0 = NaN.
    logp = torch.tensor([[800.0]], dtype=F64, requires_grad=True)
    zero = torch.zeros(1, 1, dtype=F64)
    with pytest.raises(ValueError, match="^logp: the no_clip loss is NaN"):
        policy_loss("no_clip", logp, zero, zero, torch.ones(1, 1, dtype=torch.bool))


# ---------------------------------------------------------------------------------------------
# The loss leaves its inputs alone, and checks a batch once
# ---------------------------------------------------------------------------------------------

EVERY_OPTION = {
    "token_mask": True,
    "seq_mask": True,
    "tis_cap": 2.0,
    "sq_log_ratio_coef": 1e-3,
    "token_mask_ref": "engine",
}


def _every_input(gen, rows=4, cols=9, mask_dtype=torch.bool):
    behav = -torch.rand(rows, cols, generator=gen, dtype=F64)
    return {
        "logp": (behav + 0.5 * torch.randn(rows, cols, generator=gen, dtype=F64)).requires_grad_(True),
        "behav_logp": behav,
        "advantages": torch.randn(rows, 1, generator=gen, dtype=F64).expand(rows, cols).contiguous(),
        "mask": (torch.arange(cols)[None, :] < torch.tensor([[cols], [cols - 3], [1], [0]])).to(mask_dtype),
        "rollout_logp": behav + 0.1 * torch.randn(rows, cols, generator=gen, dtype=F64),
        "prox_logp": behav + 0.1 * torch.randn(rows, cols, generator=gen, dtype=F64),
        "m2po_keep": torch.rand(rows, cols, generator=gen) > 0.3,
    }


@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float64])
@pytest.mark.parametrize("name", OBJECTIVES)
def test_the_loss_does_not_change_its_inputs(name, mask_dtype):
    """Neither the values nor in place (a tensor's version counter counts every in-place write, through
    any view of it), with every option on, m2po both with its own mask and with one handed in."""
    inputs = _every_input(torch.Generator().manual_seed(5), mask_dtype=mask_dtype)
    before = {k: (v.detach().clone(), v._version) for k, v in inputs.items()}
    options = {**EVERY_OPTION, "dual_clip_c": 3.0} if name in DUAL_CLIP_OBJECTIVES else EVERY_OPTION
    for keep in [None, inputs["m2po_keep"]] if name == "m2po" else [None]:
        loss, _ = policy_loss(
            name,
            inputs["logp"],
            inputs["behav_logp"],
            inputs["advantages"],
            inputs["mask"],
            rollout_logp=inputs["rollout_logp"],
            prox_logp=inputs["prox_logp"],
            m2po_keep=keep,
            **options,
        )
        loss.backward()
    for k, v in inputs.items():
        assert torch.equal(v.detach(), before[k][0]), k
        assert v._version == before[k][1], k


@pytest.mark.parametrize("name", OBJECTIVES)
def test_a_batch_checked_once_gives_each_slice_of_rows_the_same_loss(name):
    inputs = _every_input(torch.Generator().manual_seed(6))
    tensors = {k: inputs[k] for k in ("rollout_logp", "prox_logp")}
    options = {**EVERY_OPTION, "dual_clip_c": 3.0} if name in DUAL_CLIP_OBJECTIVES else EVERY_OPTION
    args = ("behav_logp", "advantages", "mask")
    checked = check_loss_inputs(name, *(inputs[k] for k in args), **tensors, **options)
    for rows in (slice(0, 2), slice(2, 4)):
        got = policy_loss_checked(name, checked.rows(rows), inputs["logp"][rows], *(inputs[k][rows] for k in args))
        rows_tensors = {k: v[rows] for k, v in tensors.items()}
        want = policy_loss_marked(
            name, inputs["logp"][rows], *(inputs[k][rows] for k in args), **rows_tensors, **options
        )
        assert torch.equal(got[0], want[0]) and got[1] == want[1]
        assert all(torch.equal(getattr(got[2], f), getattr(want[2], f)) for f in ("masked", "clipped", "reweighted"))


def test_check_loss_inputs_names_the_bad_tensor():
    inputs = _every_input(torch.Generator().manual_seed(7))
    inputs["behav_logp"][1, 2] = math.nan
    with pytest.raises(ValueError, match="behav_logp: contains NaN"):
        check_loss_inputs("grpo", inputs["behav_logp"], inputs["advantages"], inputs["mask"])


def test_the_stats_leave_the_loss_batch_alone(monkeypatch):
    """The stats read the batch the surrogate computed from (the trust-region M2 among it) and write
    none of it: a stat computed later reads what the loss read."""
    versions = []

    def spy(loss, b, marks, extra):
        before = {f.name: getattr(b, f.name)._version for f in dataclasses.fields(b)}
        out = real_stats(loss, b, marks, extra)
        versions.append((before, {f.name: getattr(b, f.name)._version for f in dataclasses.fields(b)}))
        return out

    real_stats = objectives._stats
    monkeypatch.setattr(objectives, "_stats", spy)
    inputs = _every_input(torch.Generator().manual_seed(8))
    for name in ("m2po", "grpo"):
        policy_loss(name, inputs["logp"], inputs["behav_logp"], inputs["advantages"], inputs["mask"], tau_m2=1e-3)
    assert len(versions) == 2 and all(before == after for before, after in versions)
