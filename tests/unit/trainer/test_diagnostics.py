"""Off-policy diagnostics (trainer/algo/diagnostics.py) against literal references, and the A < 0 tail of
the runaway tail reproduced on a crafted minibatch: one huge-ratio A < 0 token sets the update's direction
without the dual clip and carries no gradient with it, and the diagnostics show it."""

import math
from fractions import Fraction

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from trainer.algo.diagnostics import (
    ENGINE_KEYS,
    UPDATE_KEYS,
    engine_diagnostics,
    engine_drift,
    policy_drift,
    update_diagnostics,
)
from trainer.algo.objectives import policy_loss
from trainer.loss_keys import ENGINE_DRIFT_KEYS, POLICY_DRIFT_KEYS

from .test_objectives import batches

F64 = torch.float64
HUNDRED = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def ref_update(log_r, adv, mask):
    """Each diagnostic from its definition, over the valid tokens, in Python floats."""
    lr = [v for v, m in zip(log_r.flatten().tolist(), mask.flatten().tolist()) if m]
    a = [v for v, m in zip(adv.flatten().tolist(), mask.flatten().tolist()) if m]
    r = [math.exp(v) for v in lr]
    out = {}
    for side, pick in (("pos", lambda x: x > 0), ("neg", lambda x: x < 0)):
        values = sorted(ri for ri, ai in zip(r, a) if pick(ai))
        n = len(values)
        for name, q in (("p50", Fraction(1, 2)), ("p99", Fraction(99, 100))):
            out[f"actor/ratio_{side}_{name}"] = values[max(1, math.ceil(q * n)) - 1] if n else 1.0  # nearest rank
        out[f"actor/ratio_{side}_max"] = values[-1] if n else 1.0
    weights = [ri * abs(ai) for ri, ai in zip(r, a)]
    out["actor/top_token_share_max"] = max(weights) / sum(weights) if sum(weights) > 0 else 0.0
    n = len(r)
    out["actor/kl_k3"] = sum(ri - 1 - li for ri, li in zip(r, lr)) / n if n else 0.0
    out["actor/chi2"] = sum((ri - 1) ** 2 for ri in r) / n if n else 0.0
    out["actor/ess_frac"] = sum(r) ** 2 / (n * sum(ri * ri for ri in r)) if n else 1.0
    return out


@HUNDRED
@given(batch=batches(max_rows=5, max_cols=16))
def test_update_diagnostics_match_their_definitions(batch):
    log_r = (batch["logp"] - batch["behav"]).masked_fill(~batch["mask"], 0.0)
    got = update_diagnostics(log_r, batch["adv"], batch["mask"])
    assert set(got) == set(UPDATE_KEYS)
    assert got == pytest.approx(ref_update(log_r, batch["adv"], batch["mask"]), rel=1e-9, abs=1e-9)


@HUNDRED
@given(batch=batches(max_rows=5, max_cols=16))
def test_engine_diagnostics_match_their_definitions(batch):
    engine, trainer, mask = batch["logp"], batch["behav"], batch["mask"]  # two log-prob tensors of one batch
    got = engine_diagnostics(engine, trainer, mask)
    d = [e - t for e, t, m in zip(engine.flatten().tolist(), trainer.flatten().tolist(), mask.flatten().tolist()) if m]
    n = len(d)
    rho = [math.exp(-x) for x in d]  # pi_trainer / pi_engine
    expected = {
        "rollout/engine_abs_dlogp": sum(map(abs, d)) / n if n else 0.0,
        "rollout/engine_abs_dlogp_max": max(map(abs, d)) if n else 0.0,
        "rollout/engine_kl_k3": sum(p - 1 - math.log(p) for p in rho) / n if n else 0.0,
    }
    assert set(got) == set(ENGINE_KEYS)
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-9)


def ref_drift(log_w: list[float], prefix: str) -> dict[str, float]:
    n = len(log_w)
    w = [math.exp(v) for v in log_w]
    absolute = sorted(abs(v) for v in log_w)
    return {
        f"{prefix}_kl_k3": sum(x - 1 - v for x, v in zip(w, log_w)) / n if n else 0.0,
        f"{prefix}_abs_dlogp": sum(absolute) / n if n else 0.0,
        f"{prefix}_abs_dlogp_p99": absolute[max(1, math.ceil(Fraction(99, 100) * n)) - 1] if n else 0.0,
        f"{prefix}_chi2": sum((x - 1) ** 2 for x in w) / n if n else 0.0,
        f"{prefix}_ess_frac": sum(w) ** 2 / (n * sum(x * x for x in w)) if n else 1.0,
    }


@HUNDRED
@given(batch=batches(max_rows=5, max_cols=16))
def test_the_two_drifts_match_their_definitions(batch):
    engine, trainer, theta, mask = batch["behav"], batch["logp"], batch["logp"] * 0.5, batch["mask"]
    pick = mask.flatten().tolist()
    engine_w = [t - e for t, e, m in zip(trainer.flatten().tolist(), engine.flatten().tolist(), pick) if m]
    got = engine_drift(engine, trainer, mask)  # w = pi_trainer / pi_engine
    assert set(got) == set(ENGINE_DRIFT_KEYS)
    assert got == pytest.approx(ref_drift(engine_w, "drift/engine"), rel=1e-9, abs=1e-9)
    log_r = theta - trainer
    policy_w = [v for v, m in zip(log_r.flatten().tolist(), pick) if m]
    got = policy_drift(log_r, mask)  # w = pi_theta / pi_trainer
    assert set(got) == set(POLICY_DRIFT_KEYS)
    assert got == pytest.approx(ref_drift(policy_w, "drift/policy"), rel=1e-9, abs=1e-9)


def test_a_policy_that_did_not_move_has_no_drift_whatever_the_engine_did():
    trainer = torch.tensor([[-1.0, -2.0, -0.5]], dtype=F64)
    engine = trainer + torch.tensor([[0.3, -0.2, 0.1]], dtype=F64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    policy = policy_drift(trainer - trainer, mask)
    assert policy == {k: (1.0 if k.endswith("ess_frac") else 0.0) for k in POLICY_DRIFT_KEYS}
    engine_side = engine_drift(engine, trainer, mask)
    assert engine_side["drift/engine_abs_dlogp"] == pytest.approx(0.2)
    assert engine_side["drift/engine_abs_dlogp_p99"] == pytest.approx(0.3)
    assert engine_side["drift/engine_kl_k3"] > 0 and engine_side["drift/engine_ess_frac"] < 1


def test_k3_does_not_cancel_where_the_k1_mean_does():
    # Engine log-probs off by +0.5 and -0.5 on two tokens: K1 (rollout/engine_kl) is 0, K3 is not.
    trainer = torch.zeros(1, 2, dtype=F64)
    engine = torch.tensor([[0.5, -0.5]], dtype=F64)
    got = engine_diagnostics(engine, trainer, torch.ones(1, 2, dtype=torch.bool))
    assert float((engine - trainer).mean()) == 0.0
    assert got["rollout/engine_kl_k3"] == pytest.approx((math.exp(-0.5) - 1 + 0.5 + math.exp(0.5) - 1 - 0.5) / 2)
    assert got["rollout/engine_abs_dlogp"] == 0.5 and got["rollout/engine_abs_dlogp_max"] == 0.5


# ---------------------------------------------------------------------------------------------
# The A < 0 tail: a token with A < 0 and r >> 1 is outside every trust region
# ---------------------------------------------------------------------------------------------

TAIL_RATIO = 1000.0


def _tail_minibatch():
    """A tiny softmax policy over 16 tokens; 8 sequences of 8 tokens with GRPO-like advantages
    +-1, behaviour log-probs within about 5% of the current ones, except one token with A < 0 that
    the behaviour policy gave 1/1000 of its current probability: r = 1000."""
    g = torch.Generator().manual_seed(23)
    weights = (0.5 * torch.randn(16, 6, generator=g, dtype=F64)).requires_grad_(True)  # (V, H) the parameters
    features = torch.randn(8, 8, 6, generator=g, dtype=F64)  # (B, T, H)
    sampled = torch.randint(0, 16, (8, 8), generator=g)  # (B, T)

    def logp_of(w):
        return torch.log_softmax(features @ w.T, dim=-1).gather(-1, sampled[..., None]).squeeze(-1)  # (B, T)

    adv = torch.tensor([1.0, -1.0] * 4, dtype=F64)[:, None].expand(8, 8).contiguous()
    behav = logp_of(weights).detach() + 0.05 * torch.randn(8, 8, generator=g, dtype=F64)
    tail = (3, 5)  # row 3 has A = -1
    behav[tail] = logp_of(weights).detach()[tail] - math.log(TAIL_RATIO)
    return weights, logp_of, behav, adv, torch.ones(8, 8, dtype=torch.bool), tail


def _grad(weights, loss):
    (g,) = torch.autograd.grad(loss, weights)
    return g.flatten()


def _cos(a, b):
    return float(a @ b / (a.norm() * b.norm()))


@pytest.mark.parametrize("name", ["m2po", "m2po_cap", "grpo", "no_clip"])
def test_one_huge_ratio_negative_advantage_token_sets_the_direction_unless_the_dual_clip_bounds_it(name):
    weights, logp_of, behav, adv, mask, tail = _tail_minibatch()
    without_tail = adv.clone()
    without_tail[tail] = 0.0  # the same minibatch and normaliser, the tail token's advantage gone
    only_tail = torch.zeros_like(adv)
    only_tail[tail] = adv[tail]

    g_plain = _grad(weights, policy_loss(name, logp_of(weights), behav, adv, mask)[0])
    g_rest = _grad(weights, policy_loss(name, logp_of(weights), behav, without_tail, mask)[0])
    g_tail = _grad(weights, policy_loss("no_clip", logp_of(weights), behav, only_tail, mask)[0])  # -r A d log pi / n
    # Without the dual clip the one token sets the update's direction (gradient clipping to norm 1
    # keeps the direction): the rest of the minibatch barely shows in it.
    assert _cos(g_plain, g_tail) > 0.99, name
    assert g_plain.norm() > 20 * g_rest.norm()

    loss, stats = policy_loss(name, logp_of(weights), behav, adv, mask, dual_clip_c=3.0)
    g_dual = _grad(weights, loss)
    # With c = 3 that token's objective is the constant c A: no gradient, the rest decide.
    torch.testing.assert_close(g_dual, g_rest)
    assert stats["actor/dual_clip_frac"] == pytest.approx(1 / 64) and stats["actor/clipped_frac"] >= 1 / 64

    # The diagnostics show it: the A < 0 tail and the one token's share of sum r |A|.
    log_r = logp_of(weights).detach() - behav
    diag = update_diagnostics(log_r, adv, mask)
    assert diag["actor/ratio_neg_max"] == pytest.approx(TAIL_RATIO, rel=1e-9)
    assert diag["actor/ratio_pos_max"] < 1.3 and diag["actor/ratio_neg_p50"] < 1.1
    assert diag["actor/top_token_share_max"] > 0.88  # the collapsing minibatches: 0.88-0.997
    fresh = log_r.clone()
    fresh[tail] = 0.0  # the same minibatch with the tail token on-policy
    healthy = update_diagnostics(fresh, adv, mask)
    assert healthy["actor/top_token_share_max"] < 0.05 and healthy["actor/ratio_neg_max"] < 1.3
    assert diag["actor/ess_frac"] < 0.1 < healthy["actor/ess_frac"]
