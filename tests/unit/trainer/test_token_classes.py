"""Per-token-class diagnostics on a crafted micro-batch, worked out by hand, and summed over two
micro-batches the way an update splits its minibatch."""

import math

import pytest
import torch

from trainer.algo.token_classes import NEAR_DET_ENTROPY, TokenClassTally

# 2 rows x 4 response tokens; decisions sit at positions 1 and 3; row 1's last token is padding.
MASK = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.float32)
ENTROPY = torch.tensor([[0.01, 0.6, 0.02, 0.7], [0.05, 0.5, 0.3, 9.0]])
LOG_R = torch.tensor([[0.1, 0.4, -0.2, -0.3], [0.0, -0.5, 0.2, 5.0]])
ADV = torch.tensor([[1.0, 1.0, 1.0, 1.0], [-1.0, -1.0, -1.0, 0.0]])
MARKED = torch.tensor([[False, True, False, False], [False, True, False, True]])  # row 1's pad mark is ignored


def test_a_micro_batch_by_hand():
    tally = TokenClassTally([1, 3])
    tally.add(MASK, ENTROPY, MARKED, LOG_R, ADV)
    stats = tally.stats()
    # 7 valid tokens; entropies below 0.1: 0.01, 0.02, 0.05
    assert stats["actor/near_det_frac"] == pytest.approx(3 / 7)
    assert stats["actor/decision_frac"] == pytest.approx(3 / 7)  # (0,1), (0,3), (1,1)
    # trust region (A>0, r>1) or (A<0, r<1): decisions (0,1) 0.4 and (1,1) -0.5; (0,3) has A>0, r<1
    assert stats["actor/m2_decision"] == pytest.approx((0.4**2 + 0.5**2) / 2)
    # format tokens (0,0) 0.1, (0,2) no (A>0, r<1), (1,0) no (log r = 0), (1,2) no (A<0, r>1)
    assert stats["actor/m2_format"] == pytest.approx(0.1**2)
    assert stats["actor/marked_frac_decision"] == pytest.approx(2 / 3)
    assert stats["actor/marked_frac_format"] == 0.0
    assert stats["actor/entropy_decision"] == pytest.approx((0.6 + 0.7 + 0.5) / 3)
    assert stats["actor/entropy_format"] == pytest.approx((0.01 + 0.02 + 0.05 + 0.3) / 4)
    assert NEAR_DET_ENTROPY == 0.1


def test_two_micro_batches_sum_to_the_whole():
    whole, split = TokenClassTally([1, 3]), TokenClassTally([1, 3])
    whole.add(MASK, ENTROPY, MARKED, LOG_R, ADV)
    for rows in (slice(0, 1), slice(1, 2)):
        split.add(MASK[rows], ENTROPY[rows], MARKED[rows], LOG_R[rows], ADV[rows])
    assert split.stats() == pytest.approx(whole.stats())


def test_a_task_without_decision_positions_logs_the_near_deterministic_fraction_only():
    tally = TokenClassTally(None)
    tally.add(MASK, ENTROPY, MARKED, LOG_R, ADV)
    assert tally.stats() == {"actor/near_det_frac": pytest.approx(3 / 7)}
    empty = TokenClassTally([1])
    assert all(math.isfinite(v) for v in empty.stats().values())  # nothing added: zeros, never NaN
