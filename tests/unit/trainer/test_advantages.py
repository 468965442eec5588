"""GRPO advantages: (R - group mean) / (group std + eps), computed here by hand in float64."""

import math
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.algo.advantages import broadcast_to_tokens, grpo_advantages
from trainer.rollout.rewards import arithmetic_reward, boxed_integer_reward

F64 = torch.float64


def test_a_group_by_hand():
    # rewards 1, 0, 0, 1: mean 0.5, unbiased std sqrt(1/3).
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=F64), group_size=4, eps=0.0)
    s = math.sqrt(1 / 3)
    assert adv.tolist() == pytest.approx([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s])


def test_groups_are_normalised_separately_and_order_is_kept():
    rewards = torch.tensor([[1.0, 0.0], [5.0, 7.0]], dtype=F64)
    adv = grpo_advantages(rewards, group_size=2, eps=0.0)
    s1, s2 = math.sqrt(0.5), math.sqrt(2.0)
    assert adv.shape == (4,)
    assert adv.tolist() == pytest.approx([0.5 / s1, -0.5 / s1, -1 / s2, 1 / s2])


def test_equal_rewards_give_zero_not_nan():
    adv = grpo_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0]), group_size=3, eps=0.0)
    assert adv.tolist() == [0.0] * 6


@pytest.mark.parametrize("normalize", [True, False])
def test_a_group_of_equal_partial_credits_gets_exactly_zero(normalize):
    # Values the rewards really give: 0.9 for "042" (the right number, not canonical), 0.9 x
    # closeness for near misses, 0.1 for a wrong boxed integer. A float32 mean of eight 0.9s is
    # 0.90000004; dividing that residue by a std of 3e-8 gave every sample A = -0.056 before.
    credits = [
        arithmetic_reward("042", True, "42"),
        arithmetic_reward("41", True, "42"),
        arithmetic_reward("40", True, "47"),
        boxed_integer_reward(r"\boxed{3}", "4"),
        1 / 3,
    ]
    assert credits[0] == 0.9 and credits[3] == 0.1 and len(set(credits)) == len(credits)
    for credit in credits:  # one group alone, as a one-prompt step trains it
        adv = grpo_advantages(torch.full((8,), credit), group_size=8, normalize_std=normalize)
        assert adv.tolist() == [0.0] * 8, credit
    batch = torch.tensor([c for c in credits for _ in range(8)] + [0.9] * 7 + [1.0])
    adv = grpo_advantages(batch, group_size=8, normalize_std=normalize)
    assert adv[:-8].tolist() == [0.0] * (len(batch) - 8)
    assert adv[-1] > 0 > adv[-2]  # a group with any spread keeps the formula


def test_dr_grpo_skips_the_division_by_std():
    adv = grpo_advantages(torch.tensor([3.0, 1.0, 2.0]), group_size=3, normalize_std=False)
    assert adv.tolist() == pytest.approx([1.0, -1.0, 0.0])


@settings(max_examples=200, deadline=None)
@given(
    groups=st.lists(
        st.lists(st.one_of(st.sampled_from([0.0, 1.0]), st.floats(-100, 100)), min_size=4, max_size=4),
        min_size=1,
        max_size=6,
    ),
    normalize=st.booleans(),
)
def test_matches_the_formula(groups, normalize):
    adv = grpo_advantages(torch.tensor(groups, dtype=F64).flatten(), 4, normalize_std=normalize)
    expected = []
    for rewards in groups:
        mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
        for r in rewards:
            expected.append((r - mean) / (std + 1e-6) if normalize else r - mean)
    assert adv.tolist() == pytest.approx(expected, rel=1e-9, abs=1e-9)
    assert torch.isfinite(adv).all()


def test_broadcast_to_tokens_zeroes_padding():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]]).bool()
    tokens = broadcast_to_tokens(torch.tensor([2.0, -1.0]), mask)
    assert tokens.tolist() == [[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"rewards": torch.tensor([1.0, 2.0, 3.0]), "group_size": 2}, "rewards"),
        ({"rewards": torch.tensor([[1.0, 2.0, 3.0]]), "group_size": 2}, "rewards"),
        ({"rewards": torch.tensor([1.0, math.nan]), "group_size": 2}, "rewards"),
        ({"rewards": torch.tensor([1, 2]), "group_size": 2}, "rewards"),
        ({"rewards": torch.tensor([1.0, 2.0]), "group_size": 1}, "group_size"),
        ({"rewards": torch.tensor([1.0, 2.0]), "group_size": 2, "eps": -1.0}, "eps"),
    ],
)
def test_bad_input_names_the_argument(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}: "):
        grpo_advantages(**kwargs)


def test_broadcast_checks_the_shapes():
    with pytest.raises(ValueError, match="^seq_advantages: "):
        broadcast_to_tokens(torch.zeros(3), torch.ones(2, 4).bool())
