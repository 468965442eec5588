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

from trainer.rollout.batch import (
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
    expanded = [p for p in prompts for _ in range(n)]
    state = _Rows(engine, expanded, max_new_tokens)
    start_version, swaps = version, 0
    model = engine.model
    was_training = model.training
    model.eval()
    try:
        while state.active.numel():
            state.segment(temperature, top_p, newer, version - start_version, recompute)
            if state.active.numel():
                version = load()
                swaps += 1
    finally:
        model.train(was_training)
    return state.result(recompute, swaps, version - start_version)


class _Rows:
    """The batch's rows while they generate: tokens, engine and behaviour log-probs, versions."""

    def __init__(self, engine, prompts: list[str], max_new_tokens: int):
        self.engine, self.policy, self.max_new = engine, engine.policy, max_new_tokens
        self.eos_ids = self.policy.eos_token_ids
        self.ids, self.prompt_mask = encode_prompts(self.policy, prompts, engine.device)
        B = self.ids.shape[0]
        self.tokens = torch.full((B, max_new_tokens), self.policy.tokenizer.pad_token_id, dtype=torch.long)
        self.engine_lp = torch.zeros(B, max_new_tokens)
        self.behav_lp = torch.zeros(B, max_new_tokens)
        self.offsets = torch.zeros(B, max_new_tokens, dtype=torch.int16)
        self.done = torch.zeros(B, dtype=torch.long)  # tokens generated per row
        self.active = torch.arange(B)  # rows still generating
        precision = engine.precision
        self.autocast = precision.autocast if precision is not None else nullcontext

    def segment(self, temperature: float, top_p: float, newer, offset: int, recompute: bool) -> None:
        """Generate the active rows until they end or newer weights are published."""
        active, dev, model = self.active, self.engine.device, self.engine.model
        width = int(self.done[active[0]])  # active rows are in lockstep: same tokens so far
        seq = torch.cat([self.ids[active], self.tokens[active, :width].to(dev)], dim=1)
        mask = torch.cat([self.prompt_mask[active], torch.ones(len(active), width, dtype=torch.long, device=dev)], 1)
        recorder = SampledLogprobRecorder(temperature)
        pad = self.policy.tokenizer.pad_token_id
        config = sampling_config(temperature, top_p, self.max_new - width, self.eos_ids, pad)
        with self.autocast():
            out = model.generate(
                input_ids=seq,
                attention_mask=mask,
                generation_config=config,
                logits_processor=LogitsProcessorList([recorder]),
                stopping_criteria=StoppingCriteriaList([_NewerWeights(newer)]),
            )
        new = out.sequences[:, seq.shape[1] :]
        got, cols = new.shape[1], slice(width, width + new.shape[1])
        self.tokens[active, cols] = new.cpu()
        self.engine_lp[active, cols] = recorder.finish(out.sequences, got).float().cpu()
        self.offsets[active, cols] = offset
        self.done[active] += got
        finished = is_eos_token(new, self.eos_ids).any(-1).cpu() | (self.done[active] >= self.max_new)
        if recompute and not bool(finished.all()):  # a swap follows: score the segment with its weights
            full, full_mask = torch.cat([seq, new], dim=1), torch.cat([mask, torch.ones_like(new)], dim=1)
            with self.autocast():
                seg_lp, _ = token_logprobs(model, full, full_mask, self.ids.shape[1], temperature)
            self.behav_lp[active, cols] = seg_lp[:, cols].float().cpu()
        self.active = active[~finished]

    def result(self, recompute: bool, swaps: int, last_offset: int) -> PartialGeneration:
        R = int(self.done.max())
        tok, eos_ids = self.policy.tokenizer, self.eos_ids
        responses = self.tokens[:, :R]
        rmask = response_mask_from(responses, eos_ids)
        sequences = torch.cat([self.ids.cpu(), responses], dim=1)
        P = self.ids.shape[1]
        gen = _finish(tok, eos_ids, sequences, self.prompt_mask.cpu(), rmask, self.engine_lp[:, :R] * rmask, P)
        behav = self.behav_lp[:, :R] * rmask if recompute else None
        return PartialGeneration(gen, self.offsets[:, :R] * rmask.to(torch.int16), behav, swaps, last_offset)


def merge_behaviour(whole: torch.Tensor, partial: PartialGeneration) -> torch.Tensor:
    """The batch's behaviour log-probs: `whole` (the batch scored by the last version's weights)
    for that version's tokens, each earlier segment's own scores for the rest."""
    if partial.behav_logp is None or not partial.swaps:
        return whole
    last = partial.token_version_offsets == partial.last_offset
    return torch.where(last, whole, partial.behav_logp)
