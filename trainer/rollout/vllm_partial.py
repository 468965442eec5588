"""Partial rollouts with the vllm engine: generation that stops at a weight update, loads the new
weights and continues the unfinished responses (trainer/rollout/partial.py does the same for hf).

vLLM's offline `LLM.generate` runs every request to its end, so the engine is driven one step at
a time here (`LLMEngine.add_request` / `step`), each row as its own request (rows are added in the
order `generate` fans out its n samples, so with no swap the engine sees the same batch). After
each step `newer()` is asked; when newer weights were published the unfinished requests are
aborted, `load()` loads the weights (the engine's `load_weights` also drops every cached KV block)
and each unfinished row is submitted again as its prompt plus the tokens it has so far, for the
tokens it has left. Its prefix is therefore recomputed under the new weights, exactly as the hf
engine's continuation recomputes it: a token's version is that of the weights that computed it,
prefix included. vLLM's pause with `mode="keep"` would continue over KV blocks computed by the old
weights instead, which no single version produced.

Every response token keeps its version (`token_version_offsets`), its engine log-prob, and with
`behav_logp: recompute` the trainer's log-prob at that version: a segment followed by a swap is
scored by the generator's hf copy of the policy before it loads the new weights; the last
version's tokens are scored with the whole batch afterwards (`partial.merge_behaviour`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import nullcontext

import torch

from trainer.rollout.batch import token_logprobs
from trainer.rollout.partial import PartialGeneration

_request_ids = itertools.count()


@torch.no_grad()
def generate_partial_vllm(
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
    precision=None,
) -> PartialGeneration:
    """n samples per prompt (grouped as VLLMEngine.generate), continued across weight swaps."""
    ids, mask, prompt_rows = engine.encode(prompts)
    rows = _Rows(engine, [i for i in range(len(prompts)) for _ in range(n)], prompt_rows, max_new_tokens)
    start_version, swaps = version, 0
    while rows.unfinished():
        swapped = rows.segment(temperature, top_p, newer, version - start_version)
        if not swapped:
            break
        if recompute:
            rows.score_segment(ids, mask, version - start_version, temperature, precision)
        version = load()
        swaps += 1
    gen = engine.to_generation(ids, mask, rows.prompt_of_row, rows.responses())
    rmask = gen.response_mask
    width = rmask.shape[1]
    offsets = rows.padded(rows.offsets, width, torch.int16) * rmask.to(torch.int16)
    behav = rows.padded(rows.behav, width, torch.float32) * rmask if recompute else None
    return PartialGeneration(gen, offsets, behav, swaps, version - start_version)


class _Rows:
    """The batch's rows while they generate: tokens, engine and behaviour log-probs, versions."""

    def __init__(self, engine, prompt_of_row: list[int], prompt_rows: list[list[int]], max_new_tokens: int):
        self.engine, self.prompt_of_row, self.prompt_rows = engine, prompt_of_row, prompt_rows
        self.max_new = max_new_tokens
        B = len(prompt_of_row)
        self.tokens: list[list[int]] = [[] for _ in range(B)]
        self.logp: list[list[float]] = [[] for _ in range(B)]
        self.behav: list[list[float]] = [[] for _ in range(B)]  # recompute: filled per swapped segment
        self.offsets: list[list[int]] = [[] for _ in range(B)]
        self.ended = [False] * B  # an EOS, or no tokens left

    def unfinished(self) -> list[int]:
        return [r for r, ended in enumerate(self.ended) if not ended]

    def segment(self, temperature: float, top_p: float, newer, offset: int) -> bool:
        """Generate the unfinished rows until they end or newer weights are published (True)."""
        from vllm.sampling_params import RequestOutputKind

        llm, core = self.engine.llm, self.engine.llm.llm_engine
        requests = {}
        for row in self.unfinished():
            params = self.engine.sampling_params(1, self.max_new - len(self.tokens[row]), temperature, top_p)
            params.output_kind = RequestOutputKind.DELTA  # each step's new tokens, kept if it is aborted
            prompt = {"prompt_token_ids": self.prompt_rows[self.prompt_of_row[row]] + self.tokens[row]}
            request_id = f"opl-partial-{next(_request_ids)}"  # outputs and aborts name it, not vLLM's own id
            core.add_request(request_id, _engine_input(llm, prompt), params)
            requests[request_id] = row
        live = set(requests)
        while live:
            for out in core.step():
                row = requests.get(out.request_id)
                if row is None:  # an aborted request's late output
                    continue
                self._extend(row, out.outputs[0], offset)
                if out.finished:
                    self.ended[row] = True
                    live.discard(out.request_id)
            if live and newer():
                core.abort_request(list(live))
                return True
        return False

    def _extend(self, row: int, completion, offset: int) -> None:
        from trainer.rollout.vllm_engine import sampled_logprobs

        if len(completion.logprobs or []) != len(completion.token_ids):
            raise RuntimeError(
                f"vLLM returned {len(completion.logprobs or [])} log-probs for {len(completion.token_ids)} tokens"
            )
        self.tokens[row].extend(completion.token_ids)
        self.logp[row].extend(sampled_logprobs(completion))
        self.offsets[row].extend([offset] * len(completion.token_ids))

    def score_segment(self, ids, mask, offset: int, temperature: float, precision) -> None:
        """Before a swap: the trainer's log-probs of the tokens generated at `offset`, by the
        generator's hf copy of the policy, which still holds the weights that sampled them."""
        rows = [r for r, o in enumerate(self.offsets) if o and o[-1] == offset and len(self.behav[r]) < len(o)]
        if not rows:
            return
        model = self.engine.policy.model
        device = next(model.parameters()).device
        width = max(len(self.tokens[r]) for r in rows)
        pad = self.engine.policy.tokenizer.pad_token_id
        responses = torch.full((len(rows), width), pad, dtype=torch.long)
        for i, r in enumerate(rows):
            responses[i, : len(self.tokens[r])] = torch.tensor(self.tokens[r], dtype=torch.long)
        prompt_ids = torch.stack([ids[self.prompt_of_row[r]] for r in rows])
        prompt_mask = torch.stack([mask[self.prompt_of_row[r]] for r in rows])
        seq = torch.cat([prompt_ids, responses], dim=1).to(device)
        seq_mask = torch.cat([prompt_mask, torch.ones_like(responses)], dim=1).to(device)
        was_training = model.training
        model.eval()
        try:
            with precision.autocast() if precision is not None else nullcontext():
                lp, _ = token_logprobs(model, seq, seq_mask, ids.shape[1], temperature)
        finally:
            model.train(was_training)
        lp = lp.float().cpu()
        for i, r in enumerate(rows):
            self.behav[r].extend(lp[i, len(self.behav[r]) : len(self.tokens[r])].tolist())

    def responses(self) -> list[tuple[list[int], list[float]]]:
        return list(zip(self.tokens, self.logp))

    @staticmethod
    def padded(values: list[list], width: int, dtype: torch.dtype) -> torch.Tensor:
        out = torch.zeros((len(values), width), dtype=dtype)
        for r, v in enumerate(values):
            if v:
                out[r, : len(v)] = torch.tensor(v, dtype=dtype)
        return out


def _engine_input(llm, prompt: dict):
    """The prompt rendered as `LLM.generate` renders it, where this vLLM has that step (the engine
    warns that raw prompts to `add_request` are deprecated); the raw prompt otherwise."""
    render = getattr(llm, "_preprocess_cmpl_one", None)
    return render(prompt) if render is not None else prompt
