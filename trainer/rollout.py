"""Rollouts: the batch a step trains on, per-token log-probs, and the `hf` generation engine.

A `Batch` holds one generated batch: prompts left-padded to P tokens, responses right-padded to R
tokens, and per sample the reward, the behaviour log-probs and the policy version (number of
optimizer updates applied to the weights that generated it).

Behaviour log-probs are those of the sampling distribution softmax(logits / temperature) over the
full vocabulary (top_p truncation is not folded in, as with verl and vLLM logprobs). The trainer
computes its log-probs the same way, so a batch trained with the very weights that generated it has
ratio 1.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from transformers import GenerationConfig


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

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, rows: torch.Tensor) -> "Batch":
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in kw.items():
            if isinstance(value, torch.Tensor):
                kw[name] = value[rows]
        return Batch(**kw)

    def to_state(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_state(cls, state: dict) -> "Batch":
        return cls(**state)


def response_mask_from(tokens: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 for every response token up to and including the first EOS, else 0. tokens: (B, R)."""
    is_eos = (tokens == eos_id).long()
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
    """log pi(token) for each response token, (B, R); and the entropy per position if asked."""
    input_ids, attention_mask = input_ids.long(), attention_mask.long()  # batches store them compactly
    response_len = input_ids.shape[1] - prompt_len
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=False,
        logits_to_keep=response_len + 1,  # only the positions that predict response tokens
    )
    logits = out.logits[:, :-1].float() / temperature  # (B, R, V)
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, input_ids[:, prompt_len:, None]).squeeze(-1)
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
            text = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
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


class HFEngine:
    """transformers `generate`, batched, with the KV cache; CPU or GPU."""

    def __init__(self, policy, device, chunk: int = 256):
        self.policy = policy
        self.device = device
        self.chunk = chunk

    @property
    def model(self):
        return self.policy.model

    def load_weights(self, state_dict: dict) -> None:
        self.model.load_state_dict(state_dict)

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, max_new_tokens: int, temperature: float, top_p: float) -> Generation:
        """n samples for each prompt, grouped: rows [i*n, (i+1)*n) belong to prompts[i]."""
        expanded = [p for p in prompts for _ in range(n)]
        parts = [self._generate(expanded[i : i + self.chunk], max_new_tokens, temperature, top_p) for i in range(0, len(expanded), self.chunk)]
        return parts[0] if len(parts) == 1 else _concat(parts, self.policy.tokenizer.pad_token_id)

    def _generate(self, prompts, max_new_tokens, temperature, top_p) -> Generation:
        tok = self.policy.tokenizer
        ids, mask = encode_prompts(self.policy, prompts, self.device)
        was_training = self.model.training
        self.model.eval()
        # A fresh config, not the model's defaults: a repetition penalty or top_k from a hub
        # generation_config would make the sampler differ from the behaviour log-probs we record.
        config = GenerationConfig(
            do_sample=True,
            temperature=temperature,
            top_p=top_p,
            top_k=0,
            max_new_tokens=max_new_tokens,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            return_dict_in_generate=True,
            output_logits=True,
            use_cache=True,
        )
        out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        self.model.train(was_training)
        prompt_len = ids.shape[1]
        responses = out.sequences[:, prompt_len:]
        logits = torch.stack(out.logits, dim=1).float() / temperature  # (B, R, V) raw, before warpers
        logp = F.log_softmax(logits, -1).gather(-1, responses[..., None]).squeeze(-1)
        rmask = response_mask_from(responses, tok.eos_token_id)
        return _finish(tok, out.sequences, mask, rmask, logp * rmask, prompt_len)


def _finish(tok, sequences, prompt_mask, rmask, logp, prompt_len) -> Generation:
    responses = sequences[:, prompt_len:]
    full_mask = torch.cat([prompt_mask, torch.ones_like(responses)], dim=1)
    finished = ((responses == tok.eos_token_id).float() * rmask).sum(-1) > 0
    texts = []
    for row, m in zip(responses.tolist(), rmask.tolist()):
        kept = [t for t, keep in zip(row, m) if keep and t != tok.eos_token_id]
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


def make_batch(gen: Generation, rewards: list[float], version: int, group_size: int, gen_seconds: float) -> Batch:
    n = gen.input_ids.shape[0]
    return Batch(  # compact dtypes: a stale-k queue holds k whole batches, in memory and in checkpoints
        input_ids=gen.input_ids.to(torch.int32),
        attention_mask=gen.attention_mask.to(torch.int8),
        response_mask=gen.response_mask,
        behav_logp=gen.logp,
        rewards=torch.tensor(rewards, dtype=torch.float32),
        versions=torch.full((n,), version, dtype=torch.long),
        prompt_len=gen.prompt_len,
        group_size=group_size,
        gen_seconds=gen_seconds,
    )
