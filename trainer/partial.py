"""Partial rollouts with the hf engine: generation that stops at a weight update, loads the new
weights and continues the unfinished responses.

`generate_partial` runs transformers' `generate` in segments. A stopping criterion ends a segment
as soon as `newer()` says newer weights were published; the engine then calls `load()` (which
loads them and returns their version) and continues the rows that have not ended, from their
prompt and the tokens so far, for the tokens they have left. Every response token keeps:
- its version (the weights that sampled it): `token_version_offsets` relative to the first, and
- its engine log-prob (softmax of the sampled step's scores, as SampledLogprobRecorder records);
- with `behav_logp: recompute`, its behaviour log-prob as the trainer would compute it at that
  version: a segment followed by a swap is scored by the weights that sampled it, before the
  swap; the last version's tokens are scored with the whole batch afterwards, as without partial
  rollouts (`merge_behaviour`), so a batch with no swap is exactly the batch the plain engine makes.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from trainer.rollout import (
    Generation,
    SampledLogprobRecorder,
    _finish,
    encode_prompts,
    is_eos_token,
    response_mask_from,
    sampling_config,
    token_logprobs,
)


class _NewerWeights(StoppingCriteria):
    """Ends the segment (every row) once newer weights are published."""

    def __init__(self, newer: Callable[[], bool]):
        self.newer = newer

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        stop = bool(self.newer())
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


@dataclass
class PartialGeneration:
    generation: Generation
    token_version_offsets: torch.Tensor  # (B, R) int16
    behav_logp: torch.Tensor | None  # (B, R) recompute: trainer log-probs of the tokens before the last swap
    swaps: int  # weight loads during the batch
    last_offset: int  # the version the batch ended with, minus its first


@torch.no_grad()
def generate_partial(
    engine,
    prompts: list[str],
    n: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    newer: Callable[[], bool],
    load: Callable[[], int],
    version: int,
    recompute: bool,
) -> PartialGeneration:
    """n samples per prompt (grouped as HFEngine.generate), continued across weight swaps."""
    policy, model, dev = engine.policy, engine.model, engine.device
    tok, eos_ids = policy.tokenizer, policy.eos_token_ids
    expanded = [p for p in prompts for _ in range(n)]
    ids, prompt_mask = encode_prompts(policy, expanded, dev)
    B, P = ids.shape
    tokens = torch.full((B, max_new_tokens), tok.pad_token_id, dtype=torch.long)
    engine_lp = torch.zeros(B, max_new_tokens)
    behav_lp = torch.zeros(B, max_new_tokens)
    offsets = torch.zeros(B, max_new_tokens, dtype=torch.int16)
    done = torch.zeros(B, dtype=torch.long)  # tokens generated per row
    active = torch.arange(B)  # rows still generating
    start_version, swaps = version, 0
    autocast = engine.precision.autocast if engine.precision is not None else nullcontext
    was_training = model.training
    model.eval()
    try:
        while active.numel():
            width = int(done[active[0]])  # active rows are in lockstep: same tokens so far
            seq = torch.cat([ids[active], tokens[active, :width].to(dev)], dim=1)
            mask = torch.cat([prompt_mask[active], torch.ones(len(active), width, dtype=torch.long, device=dev)], 1)
            recorder = SampledLogprobRecorder(temperature)
            config = sampling_config(temperature, top_p, max_new_tokens - width, eos_ids, tok.pad_token_id)
            with autocast():
                out = model.generate(
                    input_ids=seq,
                    attention_mask=mask,
                    generation_config=config,
                    logits_processor=LogitsProcessorList([recorder]),
                    stopping_criteria=StoppingCriteriaList([_NewerWeights(newer)]),
                )
            new = out.sequences[:, seq.shape[1] :]
            got = new.shape[1]
            lp = recorder.finish(out.sequences, got).float().cpu()
            tokens[active, width : width + got] = new.cpu()
            engine_lp[active, width : width + got] = lp
            offsets[active, width : width + got] = version - start_version
            done[active] += got
            ended = is_eos_token(new, eos_ids).any(-1).cpu()  # the segment's rows that reached an EOS
            finished = ended | (done[active] >= max_new_tokens)
            if recompute and not bool(finished.all()):  # a swap follows: score the segment with its weights
                full = torch.cat([seq, new], dim=1)
                full_mask = torch.cat([mask, torch.ones_like(new)], dim=1)
                with autocast():
                    seg_lp, _ = token_logprobs(model, full, full_mask, P, temperature)
                behav_lp[active, width : width + got] = seg_lp[:, width : width + got].float().cpu()
            active = active[~finished]
            if active.numel():
                version = load()
                swaps += 1
    finally:
        model.train(was_training)
    R = int(done.max())
    responses = tokens[:, :R]
    rmask = response_mask_from(responses, eos_ids)
    sequences = torch.cat([ids.cpu(), responses], dim=1)
    gen = _finish(tok, eos_ids, sequences, prompt_mask.cpu(), rmask, engine_lp[:, :R] * rmask, P)
    behav = behav_lp[:, :R] * rmask if recompute else None
    return PartialGeneration(gen, offsets[:, :R] * rmask.to(torch.int16), behav, swaps, version - start_version)


def merge_behaviour(whole: torch.Tensor, partial: PartialGeneration) -> torch.Tensor:
    """The batch's behaviour log-probs: `whole` (the batch scored by the last version's weights)
    for that version's tokens, each earlier segment's own scores for the rest."""
    if partial.behav_logp is None or not partial.swaps:
        return whole
    last = partial.token_version_offsets == partial.last_offset
    return torch.where(last, whole, partial.behav_logp)
