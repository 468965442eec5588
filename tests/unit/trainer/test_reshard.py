"""The stale queue re-dealt to another world size (trainer/ckpt/reshard.py): the old ranks' slices of a
step joined in rank order, re-padded, and cut into the new world's contiguous slices of whole groups."""

import pytest
import torch

from trainer.ckpt.reshard import ReshardError, derived_rng_state, join_batches, reshard_queue
from trainer.rollout.batch import Batch

PAD = 7


def _batch(rows: int, prompt: int, response: int, first: int) -> Batch:
    """`rows` rows whose prompt has `prompt` real tokens left-padded by one, `response` tokens each."""
    ids = torch.arange(first * 100, first * 100 + rows * (prompt + 1 + response)).reshape(rows, -1).to(torch.int32)
    ids[:, 0] = PAD
    mask = torch.ones_like(ids, dtype=torch.int8)
    mask[:, 0] = 0
    n = torch.arange(first, first + rows)
    return Batch(
        input_ids=ids,
        attention_mask=mask,
        response_mask=torch.ones(rows, response),
        behav_logp=-torch.rand(rows, response),
        rewards=n.float(),
        versions=n,
        prompt_len=prompt + 1,
        group_size=2,
        reward_errors=1,
        prompts=[f"p{i}" for i in n.tolist()],
        references=[f"r{i}" for i in n.tolist()],
    )


def test_two_ranks_slices_joined_and_cut_for_three_keep_every_row_and_token():
    old = [[_batch(6, 3, 4, 0).to_state()], [_batch(6, 5, 2, 6).to_state()]]  # unequal widths
    new = [reshard_queue(old, r, 3)[0] for r in range(3)]
    assert [b.rewards.tolist() for b in new] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    whole = join_batches(new)
    assert whole.prompt_len == 6 and whole.input_ids.shape == (12, 6 + 4)
    assert [b.prompts for b in new][1] == ["p4", "p5", "p6", "p7"]
    # each row's real tokens, behaviour log-probs and masks are where they were, padding around them
    for row, (part, index) in enumerate([(0, i) for i in range(6)] + [(1, i) for i in range(6)]):
        source = Batch.from_state(old[part][0])
        real = source.input_ids[index][source.attention_mask[index].bool()]
        assert torch.equal(whole.input_ids[row][whole.attention_mask[row].bool()][: len(real)], real)
        r = source.response_mask.shape[1]
        assert torch.equal(whole.behav_logp[row, :r], source.behav_logp[index])
        assert whole.response_mask[row, r:].sum() == 0 and whole.behav_logp[row, r:].abs().sum() == 0
    assert sum(b.reward_errors for b in new) == 2  # the failure counts are kept (on the new rank 0)


def test_a_step_that_the_new_world_cannot_split_into_whole_groups_is_refused():
    old = [[_batch(4, 3, 4, 0).to_state()], [_batch(4, 3, 4, 4).to_state()]]  # 4 groups
    with pytest.raises(ReshardError, match="4 prompt groups cannot be shared equally by 3"):
        reshard_queue(old, 0, 3)


def test_queues_of_different_lengths_are_refused():
    with pytest.raises(ReshardError, match="differ in length"):
        reshard_queue([[_batch(2, 3, 4, 0).to_state()], []], 0, 1)


def test_derived_rng_is_reproducible_and_differs_per_rank():
    derived_rng_state(1, 0, 10)
    a = torch.rand(3)
    derived_rng_state(1, 0, 10)
    assert torch.equal(torch.rand(3), a)
    derived_rng_state(1, 1, 10)
    assert not torch.equal(torch.rand(3), a)
