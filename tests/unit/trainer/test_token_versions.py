"""Per-token policy versions: every response token of a batch carries the version that generated it,
through row selection, the async generator's wire format, the ranks' slices and old saved states."""

import torch

from trainer.rollout.async_feed import group_slices
from trainer.rollout.async_gen import from_wire, to_wire
from trainer.rollout.batch import Batch, Generation, make_batch
from trainer.rollout.rewards import RewardBatch

ROWS, PROMPT, RESPONSE, GROUP = 8, 3, 5, 2


def _batch(version: int) -> Batch:
    gen = Generation(
        input_ids=torch.arange(ROWS * (PROMPT + RESPONSE)).reshape(ROWS, -1),
        attention_mask=torch.ones(ROWS, PROMPT + RESPONSE, dtype=torch.long),
        response_mask=torch.ones(ROWS, RESPONSE),
        logp=-torch.rand(ROWS, RESPONSE),
        prompt_len=PROMPT,
        texts=["x"] * ROWS,
        finished=[True] * ROWS,
    )
    return make_batch(gen, RewardBatch([1.0] * ROWS), version, GROUP, 0.0)


def test_a_batch_records_the_version_of_every_response_token_compactly():
    batch = _batch(version=7)
    assert batch.token_version_offsets.dtype == torch.int16
    assert batch.token_version_offsets.shape == (ROWS, RESPONSE)
    assert torch.equal(batch.token_versions(), torch.full((ROWS, RESPONSE), 7))


def test_tokens_from_newer_weights_keep_their_own_versions_through_selection_wire_and_slices():
    batch = _batch(version=4)
    batch.token_version_offsets[:, 3:] = 2  # a partial rollout: its last two tokens under version 6
    expected = torch.tensor([4, 4, 4, 6, 6])
    back = Batch.from_state(from_wire(to_wire(batch.to_state())))  # the generator process's hand-over
    assert all(torch.equal(row, expected) for row in back.token_versions())
    picked = back.select(torch.tensor([5, 1]))
    assert torch.equal(picked.token_versions(), expected.expand(2, -1))
    first, second = group_slices(back, world=2)
    assert len(first) == len(second) == ROWS // 2
    assert torch.equal(second.token_versions(), expected.expand(ROWS // 2, -1))
    assert torch.equal(second.input_ids, batch.input_ids[ROWS // 2 :].to(torch.int32))  # whole groups, in order


def test_a_batch_saved_before_token_versions_reads_every_token_as_the_rows_version():
    state = _batch(version=3).to_state()
    del state["token_version_offsets"]
    old = Batch.from_state(state)
    old.versions[1] = 2
    versions = old.token_versions()
    assert versions.shape == (ROWS, RESPONSE)
    assert torch.equal(versions[1], torch.full((RESPONSE,), 2)) and torch.equal(versions[0], torch.full((RESPONSE,), 3))
