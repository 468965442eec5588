"""Rollouts: the batch a step trains on, per-token log-probs, and the `hf` generation engine.

A `Batch` holds one generated batch: prompts left-padded to P tokens, responses right-padded to R
tokens, and per sample the reward, the behaviour log-probs and the policy version (number of
optimizer updates applied to the weights that generated it). The version is also kept per response
token, compactly: `versions` is the oldest (that of the first token, which the staleness counts
from) and `token_version_offsets` (int16) each token's version minus it. Today a whole response
comes from one version (offsets 0); a partial rollout, continued under newer weights, would raise
the offsets of the tokens it adds.

Sampling is exactly what the run config says: every sampling field of the generation config is set
here, so nothing is inherited from a model's own `generation_config` (a shipped repetition penalty
or min_p would make the sampler differ from the log-probs we record). A response ends at the first
of *any* of the model's EOS ids.

Engine log-probs are those of the distribution actually sampled from, recorded token by token as
generation runs (never a whole response's logits): softmax(processed logits / temperature) over the
full vocabulary. top_p/top_k truncation is not folded in, so the run config refuses engine
log-probs with truncation (use `behav_logp: recompute`, the default and the paper's choice).

`token_logprobs` computes the trainer's log-probs: the model runs with a head that applies the
output projection in chunks of tokens (each chunk recomputed in backward), so no (rows, tokens,
vocabulary) tensor of a whole batch ever exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

# Logits held at once by the chunked head: tokens per chunk = LOGIT_CHUNK_ELEMENTS // vocabulary
# (2^25 floats = 128 MiB of fp32 logits, plus the same again for their log-softmax).
LOGIT_CHUNK_ELEMENTS = 1 << 25


@dataclass
class Batch:
    input_ids: torch.Tensor  # (B, P+R) int32
    attention_mask: torch.Tensor  # (B, P+R) int8
    response_mask: torch.Tensor  # (B, R) float, 1 up to and including EOS
    behav_logp: torch.Tensor  # (B, R) float
    rewards: torch.Tensor  # (B,) float
    versions: torch.Tensor  # (B,) long
    prompt_len: int
    group_size: int
    gen_seconds: float = 0.0
    rollout_logp: torch.Tensor | None = None  # (B, R) the engine's own, kept when behav_logp is recomputed
    reward_errors: int = 0  # rewards that could not be computed (counted, scored 0)
    reward_timeouts: int = 0
    prompts: list[str] | None = None  # (B,) the prompt text of each row (rollout samples)
    references: list[str] | None = None  # (B,) the reference answer of each row
    # (B, R) int16: each response token's version minus `versions`; None (a batch saved before
    # tokens had versions) reads as 0
    token_version_offsets: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, rows: torch.Tensor) -> Batch:
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in kw.items():
            if isinstance(value, torch.Tensor):
                kw[name] = value[rows]
            elif isinstance(value, list):
                kw[name] = [value[int(i)] for i in rows]
        return Batch(**kw)

    def token_versions(self) -> torch.Tensor:
        """(B, R) long: the policy version that generated each response token."""
        if self.token_version_offsets is None:
            return self.versions[:, None].expand(-1, self.behav_logp.shape[1]).clone()
        return self.versions[:, None] + self.token_version_offsets.long()

    def to_state(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_state(cls, state: dict) -> Batch:
        return cls(**state)


def is_eos_token(tokens: torch.Tensor, eos_ids: int | Sequence[int]) -> torch.Tensor:
    ids = [eos_ids] if isinstance(eos_ids, int) else list(eos_ids)
    return torch.isin(tokens, torch.tensor(ids, dtype=tokens.dtype, device=tokens.device))


def response_mask_from(tokens: torch.Tensor, eos_ids: int | Sequence[int]) -> torch.Tensor:
    """1 for every response token up to and including the first EOS (any of `eos_ids`), else 0.
    tokens: (B, R)."""
    is_eos = is_eos_token(tokens, eos_ids).long()
    eos_before = is_eos.cumsum(-1) - is_eos  # EOS tokens strictly before each position
    return (eos_before == 0).float()


def token_logprobs(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_len: int,
    temperature: float,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log pi(token) for each response token, (B, R) float32; and the entropy per position if asked.

    The output projection runs in chunks of tokens inside the model's forward (`_chunked_head`), so
    only one chunk's logits exist at a time, in forward and (recomputed) in backward."""
    input_ids, attention_mask = input_ids.long(), attention_mask.long()  # batches store them compactly
    response_len = input_ids.shape[1] - prompt_len
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    targets = input_ids[:, prompt_len:]
    with _chunked_head(model, targets, temperature, with_entropy) as result:
        model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=False,
            logits_to_keep=response_len + 1,  # only the positions that predict response tokens
        )
    return result["logp"], result.get("entropy")


def micro_batched_logprobs(model, batch: Batch, temperature: float, micro: int, device, precision=None) -> torch.Tensor:
    """Log-probs of a whole batch's response tokens without gradient, `micro` rows at a time,
    gathered on the CPU: the recompute, proximal and async passes all go through here."""
    rows = len(batch)
    micro = micro or rows
    autocast = precision.autocast if precision is not None else nullcontext
    parts = []
    with torch.no_grad():
        for start in range(0, rows, micro):
            sl = slice(start, min(rows, start + micro))
            with autocast():
                lp, _ = token_logprobs(
                    model,
                    batch.input_ids[sl].to(device),
                    batch.attention_mask[sl].to(device),
                    batch.prompt_len,
                    temperature,
                )
            parts.append(lp.float().cpu())
    return torch.cat(parts) * batch.response_mask


def recompute_behaviour_logp(batch: Batch, model, temperature: float, micro: int, device, precision=None) -> None:
    """`behav_logp: recompute`: the trainer's own copy of the behaviour weights scores the batch;
    the engine's log-probs are kept as rollout_logp (TIS, rollout/engine_kl)."""
    batch.rollout_logp = batch.behav_logp
    batch.behav_logp = micro_batched_logprobs(model, batch, temperature, micro, device, precision)


def output_head(model: torch.nn.Module) -> torch.nn.Module:
    head = model.get_output_embeddings()
    if head is None or not isinstance(head, torch.nn.Linear):
        raise NotImplementedError(f"{type(model).__name__}: the trainer needs a linear output head (lm_head)")
    if getattr(model.config, "final_logit_softcapping", None) or getattr(model.config, "logit_scale", None):
        # The model post-processes its logits after the head; the chunked head would skip that.
        raise NotImplementedError(f"{type(model).__name__}: models that post-process logits are not supported yet")
    return head


@contextmanager
def _chunked_head(model: torch.nn.Module, targets: torch.Tensor, temperature: float, with_entropy: bool):
    """While active, the model's output head returns nothing useful but fills `result` with the
    log-probs (and entropies) of `targets` (B, R), computed chunk by chunk. The head stays the
    model's own module, so FSDP has its weight unsharded exactly as during a normal forward."""
    head = output_head(model)
    result: dict[str, torch.Tensor] = {}

    def forward(hidden: torch.Tensor) -> torch.Tensor:  # hidden: (B, R+1, H)
        h = hidden[:, :-1]  # positions that predict the response tokens
        B, R, H = h.shape
        flat_h, flat_t = h.reshape(B * R, H), targets.reshape(B * R)
        per_chunk = max(1, LOGIT_CHUNK_ELEMENTS // head.out_features)
        logps, ents = [], []
        for i in range(0, B * R, per_chunk):
            args = (
                flat_h[i : i + per_chunk],
                flat_t[i : i + per_chunk],
                head.weight,
                head.bias,
                temperature,
                with_entropy,
            )
            if torch.is_grad_enabled() and flat_h.requires_grad:
                lp, ent = checkpoint(_head_chunk, *args, use_reentrant=False)
            else:
                lp, ent = _head_chunk(*args)
            logps.append(lp)
            ents.append(ent)
        result["logp"] = torch.cat(logps).view(B, R) if logps else h.new_zeros((B, R), dtype=torch.float32)
        if with_entropy:
            result["entropy"] = torch.cat(ents).view(B, R) if ents else h.new_zeros((B, R), dtype=torch.float32)
        return hidden.new_zeros(())  # what the model reports as logits; nobody reads it

    original = head.forward
    head.forward = forward
    try:
        yield result
    finally:
        head.forward = original


def _head_chunk(h, targets, weight, bias, temperature: float, with_entropy: bool):
    logits = F.linear(h, weight, bias).float() / temperature  # (N, V): one chunk only
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@dataclass
class Generation:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    logp: torch.Tensor
    prompt_len: int
    texts: list[str]
    finished: list[bool]


def encode_prompts(policy, prompts: list[str], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and mask; chat template for instruct models, BOS for the tiny one."""
    tok = policy.tokenizer
    rows = []
    for text in prompts:
        if policy.use_chat_template:
            text = tok.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
        ids = tok.encode(text, add_special_tokens=False)
        if policy.prepend_bos:
            ids = [tok.bos_token_id] + ids
        rows.append(ids)
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        mask[i, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


class SampledLogprobRecorder(LogitsProcessor):
    """Records, step by step, the log-prob of each sampled token under softmax(scores / T).

    transformers runs custom processors after its own penalties and before the temperature and
    truncation warpers, so the scores seen here are what the sampler uses (before truncation). At
    each call the token sampled after the previous call is known (the last input id), so only one
    (rows, vocabulary) step is ever held."""

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.pending: torch.Tensor | None = None  # (B, V) log-probs of the step being sampled
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.pending is not None:
            self.steps.append(self.pending.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.pending = F.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor, response_len: int) -> torch.Tensor:
        """(B, R) log-probs of the R generated tokens."""
        if self.pending is not None:
            self.steps.append(self.pending.gather(-1, sequences[:, -1:]).squeeze(-1))
            self.pending = None
        if len(self.steps) != response_len:
            raise RuntimeError(f"recorded {len(self.steps)} sampling steps for {response_len} generated tokens")
        return (
            torch.stack(self.steps, dim=1)
            if self.steps
            else sequences.new_zeros((sequences.shape[0], 0), dtype=torch.float32)
        )


def sampling_config(
    temperature: float, top_p: float, max_new_tokens: int, eos_ids: Sequence[int], pad_id: int
) -> GenerationConfig:
    """Every field that shapes sampling, set: `generate` fills any field left unset (None) from the
    model's own generation_config, so leaving one out would inherit a model's defaults."""
    return GenerationConfig(
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        top_k=0,
        min_p=0.0,
        typical_p=1.0,
        epsilon_cutoff=0.0,
        eta_cutoff=0.0,
        repetition_penalty=1.0,
        encoder_repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        encoder_no_repeat_ngram_size=0,
        min_new_tokens=0,
        max_new_tokens=max_new_tokens,
        num_beams=1,
        num_return_sequences=1,
        renormalize_logits=False,
        remove_invalid_values=False,
        eos_token_id=list(eos_ids),
        pad_token_id=pad_id,
        return_dict_in_generate=True,
        use_cache=True,
    )


class HFEngine:
    """transformers `generate`, batched, with the KV cache; CPU or GPU."""

    def __init__(self, policy, device, chunk: int = 256, precision=None):
        self.policy = policy
        self.device = device
        self.chunk = chunk
        self.precision = precision

    @property
    def model(self):
        return self.policy.model

    def load_weights(self, state_dict: dict) -> None:
        self.model.load_state_dict(state_dict)

    @torch.no_grad()
    def generate(
        self,
        prompts: list[str],
        n: int,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        record_logp: bool = True,
    ) -> Generation:
        """n samples for each prompt, grouped: rows [i*n, (i+1)*n) belong to prompts[i].
        record_logp=False (evaluation) skips the per-token log-probs (they come back as zeros)."""
        expanded = [p for p in prompts for _ in range(n)]
        parts = [
            self._generate(expanded[i : i + self.chunk], max_new_tokens, temperature, top_p, record_logp)
            for i in range(0, len(expanded), self.chunk)
        ]
        return parts[0] if len(parts) == 1 else _concat(parts, self.policy.tokenizer.pad_token_id)

    def _generate(self, prompts, max_new_tokens, temperature, top_p, record_logp) -> Generation:
        tok = self.policy.tokenizer
        eos_ids = self.policy.eos_token_ids
        ids, mask = encode_prompts(self.policy, prompts, self.device)
        was_training = self.model.training
        self.model.eval()
        config = sampling_config(temperature, top_p, max_new_tokens, eos_ids, tok.pad_token_id)
        recorder = SampledLogprobRecorder(temperature) if record_logp else None
        processors = LogitsProcessorList([recorder] if recorder else [])
        autocast = self.precision.autocast if self.precision is not None else nullcontext
        with autocast():
            out = self.model.generate(
                input_ids=ids, attention_mask=mask, generation_config=config, logits_processor=processors
            )
        self.model.train(was_training)
        prompt_len = ids.shape[1]
        responses = out.sequences[:, prompt_len:]
        if recorder is not None:
            logp = recorder.finish(out.sequences, responses.shape[1])
        else:
            logp = torch.zeros(responses.shape, dtype=torch.float32, device=responses.device)
        rmask = response_mask_from(responses, eos_ids)
        return _finish(tok, eos_ids, out.sequences, mask, rmask, logp * rmask, prompt_len)


def _finish(tok, eos_ids, sequences, prompt_mask, rmask, logp, prompt_len) -> Generation:
    responses = sequences[:, prompt_len:]
    full_mask = torch.cat([prompt_mask, torch.ones_like(responses)], dim=1)
    is_eos = is_eos_token(responses, eos_ids)
    finished = (is_eos.float() * rmask).sum(-1) > 0
    texts = []
    for row, m, e in zip(responses.tolist(), rmask.tolist(), is_eos.tolist()):
        kept = [t for t, keep, end in zip(row, m, e) if keep and not end]
        texts.append(tok.decode(kept, skip_special_tokens=True))
    return Generation(
        input_ids=sequences.cpu(),
        attention_mask=full_mask.cpu(),
        response_mask=rmask.cpu(),
        logp=logp.cpu(),
        prompt_len=prompt_len,
        texts=texts,
        finished=finished.cpu().tolist(),
    )


def _concat(parts: list[Generation], pad_id: int) -> Generation:
    """Join chunks with different prompt/response widths by re-padding."""
    P = max(g.prompt_len for g in parts)
    R = max(g.input_ids.shape[1] - g.prompt_len for g in parts)

    def pad(g: Generation):
        r = g.input_ids.shape[1] - g.prompt_len
        lp, rp = P - g.prompt_len, R - r
        ids = F.pad(g.input_ids, (lp, rp), value=pad_id)
        am = F.pad(g.attention_mask, (lp, 0), value=0)
        am = F.pad(am, (0, rp), value=1)
        return ids, am, F.pad(g.response_mask, (0, rp)), F.pad(g.logp, (0, rp))

    cols = list(zip(*[pad(g) for g in parts]))
    return Generation(
        input_ids=torch.cat(cols[0]),
        attention_mask=torch.cat(cols[1]),
        response_mask=torch.cat(cols[2]),
        logp=torch.cat(cols[3]),
        prompt_len=P,
        texts=[t for g in parts for t in g.texts],
        finished=[f for g in parts for f in g.finished],
    )


def make_batch(gen: Generation, rewards, version: int, group_size: int, gen_seconds: float, problems=None) -> Batch:
    """rewards: a trainer.rollout.rewards.RewardBatch (its failure counts travel with the batch).
    problems: (prompt text, reference answer) per row, kept for the rollout samples."""
    n = gen.input_ids.shape[0]
    prompts, references = [list(x) for x in zip(*problems)] if problems else (None, None)
    return Batch(  # compact dtypes: a stale-k queue holds k whole batches, in memory and in checkpoints
        input_ids=gen.input_ids.to(torch.int32),
        attention_mask=gen.attention_mask.to(torch.int8),
        response_mask=gen.response_mask,
        behav_logp=gen.logp,
        rewards=torch.tensor(rewards.scores, dtype=torch.float32),
        versions=torch.full((n,), version, dtype=torch.long),
        token_version_offsets=torch.zeros(gen.logp.shape, dtype=torch.int16),  # one version per response
        prompt_len=gen.prompt_len,
        group_size=group_size,
        gen_seconds=gen_seconds,
        reward_errors=rewards.errors,
        reward_timeouts=rewards.timeouts,
        prompts=prompts,
        references=references,
    )
