"""Observed staleness per token at the update that trains it, and the generator's start rule under
staleness.on_exceed (wait: admission; drop: a bounded run-ahead, the trainer discards the stale)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.config import RunConfig
from trainer.rollout.async_gen import batches_ahead, may_start
from trainer.rollout.batch import Generation, make_batch
from trainer.rollout.rewards import RewardBatch
from trainer.telemetry.staleness import ObservedStaleness, staleness_bound


def _batch(version: int, offsets: list[list[int]], mask: list[list[float]]):
    rows, width = len(offsets), len(offsets[0])
    gen = Generation(
        input_ids=torch.ones(rows, 2 + width, dtype=torch.long),
        attention_mask=torch.ones(rows, 2 + width, dtype=torch.long),
        response_mask=torch.tensor(mask),
        logp=-torch.ones(rows, width),
        prompt_len=2,
        texts=["x"] * rows,
        finished=[True] * rows,
    )
    batch = make_batch(gen, RewardBatch([0.0] * rows), version, 1, 0.0)
    batch.token_version_offsets = torch.tensor(offsets, dtype=torch.int16)
    return batch


def test_each_valid_token_counts_at_the_update_that_trains_it():
    # two rows from version 3; row 1's last two tokens came from version 4 (a continued response);
    # the padding token (mask 0) counts nowhere
    batch = _batch(3, [[0, 0, 0], [0, 1, 1]], [[1, 1, 0], [1, 1, 1]])
    observed = ObservedStaleness()
    observed.add(batch, version=5)  # first update: staleness 2 (3 tokens) and 1 (2 tokens)
    observed.add(batch, version=6)  # second update: 3 (3 tokens) and 2 (2 tokens)
    got = observed.metrics()
    assert got == {
        "rollout/observed_staleness/1": 2 / 10,
        "rollout/observed_staleness/2": 5 / 10,
        "rollout/observed_staleness/3": 3 / 10,
        "rollout/observed_staleness_max": 3.0,
    }
    assert ObservedStaleness().metrics() == {"rollout/observed_staleness_max": 0.0}


def test_the_bound_is_logged_for_async_only():
    async_cfg = RunConfig.model_validate({"staleness": {"mode": "async", "max_staleness": 6}})
    assert staleness_bound(async_cfg) == {"rollout/staleness_bound": 6.0}
    assert staleness_bound(RunConfig.model_validate({"staleness": {"mode": "stale_k", "k": 2}})) == {}


def test_on_exceed_is_checked_by_name():
    with pytest.raises(ValueError, match="on_exceed"):
        RunConfig.model_validate({"staleness": {"mode": "async", "on_exceed": "skip"}})
    assert RunConfig.model_validate({"staleness": {"mode": "async"}}).staleness.on_exceed == "wait"


@settings(max_examples=200, deadline=None)
@given(U=st.integers(1, 4), bound=st.integers(0, 9), ahead=st.integers(0, 6), old=st.integers(0, 20))
def test_drop_runs_ahead_a_bounded_number_of_batches_whatever_its_weights(U, bound, ahead, old):
    consumed, committed = 10, 100
    produced = consumed + ahead
    assert may_start("drop", committed, produced, consumed, U, old, bound) == (ahead < batches_ahead(U, bound))
    # wait never starts a batch its weights would carry past the bound
    if may_start("wait", committed, produced, consumed, U, old, bound):
        assert committed + ahead * U + U - 1 - old <= bound
