"""Partial rollouts with the hf engine, a weight swap forced mid-response: the tokens sampled
before it carry the old version and the old weights' log-probs, those after it the new ones, for
the engine's log-probs and the trainer's behaviour log-probs alike; without a swap the batch is
the plain engine's, token for token."""

import copy

import pytest
import torch

from trainer.config import ModelConfig
from trainer.data.tasks import ArithmeticTask
from trainer.policy.models import load_policy
from trainer.rollout.batch import HFEngine, make_batch, token_logprobs
from trainer.rollout.partial import generate_partial, merge_behaviour
from trainer.rollout.rewards import RewardBatch
from trainer.telemetry.staleness import version_spans

CPU = torch.device("cpu")
PROMPTS = ["12+7=", "3+45=", "8+8="]
N, MAX_NEW, SWAP_AFTER, OLD, NEW = 2, 10, 4, 5, 7


def _policy():
    return load_policy(ModelConfig(), ArithmeticTask.alphabet, seed=2, device=CPU)


def _scores(model, gen):
    lp, _ = token_logprobs(model, gen.input_ids, gen.attention_mask, gen.prompt_len, 1.0)
    return lp * gen.response_mask


def test_a_forced_swap_gives_each_token_its_version_and_log_probs():
    policy = _policy()
    old_model = copy.deepcopy(policy.model)
    new_state = {
        k: v + 0.05 * torch.randn(v.shape, generator=torch.Generator().manual_seed(1))
        for k, v in policy.model.state_dict().items()
    }
    new_model = copy.deepcopy(policy.model)
    new_model.load_state_dict(new_state)
    calls = {"n": 0}

    def newer():  # asked once per sampled token: newer weights appear after the SWAP_AFTER-th
        calls["n"] += 1
        return calls["n"] == SWAP_AFTER

    def load():
        policy.model.load_state_dict(new_state)
        return NEW

    torch.manual_seed(0)
    engine = HFEngine(policy, CPU)
    out = generate_partial(engine, PROMPTS, N, MAX_NEW, 1.0, 1.0, newer, load, OLD, recompute=True)
    gen = out.generation
    assert out.swaps == 1 and out.last_offset == NEW - OLD
    mask = gen.response_mask.bool()
    continued = mask[:, SWAP_AFTER]  # rows still generating after the swap
    assert continued.sum() >= 2, "the tiny model should rarely stop within 4 tokens"
    before, after = torch.zeros_like(mask), torch.zeros_like(mask)
    before[:, :SWAP_AFTER] = True
    after[:, SWAP_AFTER:] = True
    before, after = before & mask, after & mask
    # versions: the old one before the swap, the new one after
    offsets = out.token_version_offsets
    assert (offsets[before] == 0).all() and (offsets[after] == NEW - OLD).all()
    # the engine's log-probs: each token's from the weights that sampled it
    old_scores, new_scores = _scores(old_model, gen), _scores(new_model, gen)
    torch.testing.assert_close(gen.logp[before], old_scores[before], atol=2e-5, rtol=0)
    torch.testing.assert_close(gen.logp[after], new_scores[after], atol=2e-5, rtol=0)
    assert (old_scores[after] - new_scores[after]).abs().max() > 1e-2  # the swap is visible at all
    # the trainer's behaviour log-probs: the segment's own weights, the rest from the whole batch
    behav = merge_behaviour(new_scores, out)
    torch.testing.assert_close(behav[before], old_scores[before], atol=1e-6, rtol=0)
    assert torch.equal(behav[after], new_scores[after])
    # through a batch: per-token versions, spans and the share of continued trajectories
    batch = make_batch(gen, RewardBatch([0.0] * len(gen.texts)), OLD, N, 0.0)
    batch.token_version_offsets = offsets
    versions = batch.token_versions()
    assert (versions[before] == OLD).all() and (versions[after] == NEW).all()
    spans = version_spans(batch)
    assert spans["rollout/version_span_max"] == NEW - OLD
    assert spans["rollout/partial_frac"] == pytest.approx(continued.float().mean().item())


def test_without_a_swap_the_batch_is_the_plain_engines():
    policy = _policy()
    engine = HFEngine(policy, CPU)
    torch.manual_seed(3)
    plain = engine.generate(PROMPTS, N, MAX_NEW, 1.0, 1.0)
    torch.manual_seed(3)
    out = generate_partial(engine, PROMPTS, N, MAX_NEW, 1.0, 1.0, lambda: False, None, OLD, recompute=True)
    assert out.swaps == 0 and not out.token_version_offsets.any()
    for name in ("input_ids", "attention_mask", "response_mask", "logp"):
        assert torch.equal(getattr(out.generation, name), getattr(plain, name)), name
    assert out.generation.texts == plain.texts and out.generation.finished == plain.finished
    whole = torch.randn(plain.logp.shape)
    assert merge_behaviour(whole, out) is whole


def test_partial_rollouts_outside_async_are_refused_naming_the_field():
    from trainer.config import RunConfig

    with pytest.raises(ValueError, match=r"rollout\.partial: .*async only"):
        RunConfig.model_validate({"rollout": {"partial": True}, "staleness": {"mode": "stale_k"}})


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_partial_rollouts_are_accepted_in_async_with_either_engine(engine):
    from trainer.config import RunConfig

    cfg = RunConfig.model_validate(
        {"rollout": {"partial": True, "engine": engine}, "staleness": {"mode": "async", "max_staleness": 4}}
    )
    assert cfg.rollout.partial and cfg.rollout.engine == engine
