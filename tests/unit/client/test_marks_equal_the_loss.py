"""The client's numpy marks (opl_client.marks) against the trainer's loss, token by token: for every
objective, alone and with each option, on random stale-looking batches in float32 and float64, the
tokens `token_marks` calls masked, clipped and reweighted are exactly the ones `policy_loss_marked`
marks. The loss is the reference; the numpy code is what an SDK run's samples and the bundled
trainer's recorded samples are marked with."""

import numpy as np
import pytest
import torch

from opl_client.marks import MARKED_OBJECTIVES, m2po_dropped, token_marks
from trainer.algo.m2po_algorithm1 import m2po_keep_literal
from trainer.algo.objectives import DUAL_CLIP_OBJECTIVES, OBJECTIVES, policy_loss_marked

OPTIONS = {
    "plain": {},
    "dual_clip": {"dual_clip_c": 3.0},
    "token_mask": {"token_mask": True, "token_mask_low": 0.8, "token_mask_high": 1.25},
    "token_mask_engine": {"token_mask": True, "token_mask_ref": "engine", "token_mask_low": 0.9},
    "seq_mask": {"seq_mask": True, "seq_mask_high": 1.02},
    "tis": {"tis_cap": 1.1},
    "tuned": {"tau_m2": 0.01, "budget": 0.01, "eps_low": 0.1, "eps_high": 0.3, "sapo_tau_pos": 2.0},
}


def stale_batch(seed: int, dtype: torch.dtype, rows: int = 6, cols: int = 40) -> dict:
    gen = torch.Generator().manual_seed(seed)
    behav = -torch.rand(rows, cols, generator=gen, dtype=torch.float64) * 3
    log_r = (0.45 * torch.randn(rows, cols, generator=gen, dtype=torch.float64)) ** 3  # heavy tails
    adv = torch.randn(rows, 1, generator=gen, dtype=torch.float64).round(decimals=1).expand(rows, cols)
    mask = torch.rand(rows, cols, generator=gen) > 0.15
    mask[0, cols // 2 :] = False  # one short response
    return {
        "logp": (behav + log_r).to(dtype),
        "behav": behav.to(dtype),
        "adv": adv.contiguous().to(dtype),
        "mask": mask,
        "rollout": (behav + 0.08 * torch.randn(rows, cols, generator=gen, dtype=torch.float64)).to(dtype),
        "prox": (behav + 0.5 * log_r).to(dtype),
    }


def both(objective: str, batch: dict, **params):
    extra = {"rollout_logp": batch["rollout"]}
    if objective == "decoupled_ppo":
        extra["prox_logp"] = batch["prox"]
    with torch.no_grad():
        _, _, reference = policy_loss_marked(
            objective, batch["logp"], batch["behav"], batch["adv"], batch["mask"], **extra, **params
        )
    ours = token_marks(
        objective,
        batch["logp"].numpy(),
        batch["behav"].numpy(),
        batch["adv"].numpy(),
        batch["mask"].numpy(),
        **{name: tensor.numpy() for name, tensor in extra.items()},
        **params,
    )
    return reference, ours


def test_the_client_marks_every_objective_of_the_trainer():
    assert MARKED_OBJECTIVES == OBJECTIVES


# every pairing a run can have: the config refuses a dual clip on cispo and sapo
PAIRS = [(o, opt) for o in OBJECTIVES for opt in sorted(OPTIONS) if opt != "dual_clip" or o in DUAL_CLIP_OBJECTIVES]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("objective", "option"), PAIRS)
def test_numpy_marks_equal_the_losss_marks(objective, option, dtype):
    marked = 0
    for seed in range(4):
        reference, ours = both(objective, stale_batch(seed, dtype), **OPTIONS[option])
        for kind in ("masked", "clipped", "reweighted"):
            expected = getattr(reference, kind).numpy()
            assert np.array_equal(getattr(ours, kind), expected), f"{kind} differs at seed {seed}"
            marked += int(expected.sum())
    if objective != "no_clip" or option not in ("plain", "tuned"):
        assert marked > 0, "the batches should give this correction tokens to mark"


@pytest.mark.parametrize("seed", range(8))
def test_m2po_mask_equals_the_literal_algorithm_1(seed):
    batch = stale_batch(seed, torch.float32)
    log_r = (batch["logp"] - batch["behav"]).masked_fill(~batch["mask"], 0.0)
    adv = batch["adv"]
    trust = ((adv > 0) & (log_r > 0)) | ((adv < 0) & (log_r < 0))
    m2 = log_r.masked_fill(~trust, 0.0).square().numpy()
    dropped = m2po_dropped(m2, int(trust.sum()), 0.01)
    assert np.array_equal(~dropped, m2po_keep_literal(log_r, adv, batch["mask"], 0.01).numpy())
    assert dropped.any()


def test_m2po_decides_an_exact_tie_with_tau_exactly():
    """Three equal M2 values v with tau = v: the mean is exactly tau, so nothing is removed, although
    v + v + v in floats is above 3 tau."""
    tau = 0.3 * 0.3
    assert not m2po_dropped(np.full((1, 3), tau), 3, tau).any()


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="objective"):
        token_marks("ppo", np.zeros((1, 2)), np.zeros((1, 2)), np.zeros(1), np.ones((1, 2)))
    with pytest.raises(ValueError, match="behav_logp: shape"):
        token_marks("grpo", np.zeros((1, 2)), np.zeros((1, 3)), np.zeros(1), np.ones((1, 2)))
    with pytest.raises(ValueError, match="rollout_logp"):
        token_marks("grpo", np.zeros((1, 2)), np.zeros((1, 2)), np.zeros(1), np.ones((1, 2)), tis_cap=2.0)
    with pytest.raises(ValueError, match="tau: unknown parameter"):
        token_marks("m2po", np.zeros((1, 2)), np.zeros((1, 2)), np.zeros(1), np.ones((1, 2)), tau=0.1)
