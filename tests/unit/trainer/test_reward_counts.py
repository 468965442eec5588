"""A batch's reward failure counts survive being dealt to ranks: the async feed's slices and the
resharded queue each carry them once, so the trainer's sum over ranks is the batch's own count."""

import torch

from trainer.ckpt.reshard import join_batches
from trainer.rollout.async_feed import group_slices
from trainer.rollout.async_gen import from_wire, to_wire
from trainer.rollout.batch import Batch, Generation, make_batch
from trainer.rollout.rewards import RewardBatch

ROWS, PROMPT, RESPONSE, GROUP = 8, 3, 4, 2


def _batch_with_failures() -> Batch:
    gen = Generation(
        input_ids=torch.arange(ROWS * (PROMPT + RESPONSE)).reshape(ROWS, -1),
        attention_mask=torch.ones(ROWS, PROMPT + RESPONSE, dtype=torch.long),
        response_mask=torch.ones(ROWS, RESPONSE),
        logp=-torch.rand(ROWS, RESPONSE),
        prompt_len=PROMPT,
        texts=["x"] * ROWS,
        finished=[True] * ROWS,
    )
    rewards = RewardBatch([0.0] * ROWS, errors=3, timeouts=2, statuses=["error"] * 3 + ["timeout"] * 2 + ["ok"] * 3)
    return make_batch(gen, rewards, version=5, group_size=GROUP, gen_seconds=0.0)


def test_the_async_feed_deals_a_batchs_failures_to_one_rank_only():
    arrived = Batch.from_state(from_wire(to_wire(_batch_with_failures().to_state())))  # the generator's hand-over
    for world in (1, 2, 4):
        parts = group_slices(arrived, world)
        assert sum(p.reward_errors for p in parts) == 3 and sum(p.reward_timeouts for p in parts) == 2
        joined = join_batches(parts)  # what a resharded queue makes of them, kept alike
        assert (joined.reward_errors, joined.reward_timeouts) == (3, 2)
