"""Demonstrations: the last `per_group` samples of each group replaced by the task's reference answer.

A stand-in for pretraining in a warm-up from random init. GRPO alone does not find a structured
answer from scratch on this tiny model: on the forks task it settles on position patterns such
as "(((((((((()))" within a few hundred updates and never explores the decisions (measured, see
docs/study-notes.md). A reference answer in each group earns the group's best reward, so its
tokens get the largest advantage, and the warm-up learns the format as supervised training would;
the sampled rows keep the exploration. The rows are off-policy, which `behav_logp: recompute` (the
default) handles: their behaviour log-probs are the trainer's own, computed on them like any row.

Only for tasks whose reference answer is the whole response (arithmetic with bare answers, forks);
runs of a study fork from such a warm-up and train on their own samples alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainer.rollout.batch import Generation, response_mask_from


def inject(gen: Generation, answers: list[str], tokenizer, eos_id: int, group_size: int, per_group: int) -> Generation:
    """A copy of `gen` (rows grouped by prompt, `group_size` each; `answers` one per group) whose
    last `per_group` rows of each group hold the answer then EOS. The response width grows to the
    longest demonstration if needed."""
    if per_group <= 0:
        return gen
    demos = [tokenizer.encode(a, add_special_tokens=False) + [eos_id] for a in answers]
    P = gen.prompt_len
    R = max(gen.input_ids.shape[1] - P, max(len(d) for d in demos))
    pad = tokenizer.pad_token_id
    grow = R - (gen.input_ids.shape[1] - P)
    input_ids = F.pad(gen.input_ids, (0, grow), value=pad)
    attention = F.pad(gen.attention_mask, (0, grow), value=1)
    logp = F.pad(gen.logp, (0, grow))
    texts, finished = list(gen.texts), list(gen.finished)
    for g, (demo, answer) in enumerate(zip(demos, answers)):
        for row in range((g + 1) * group_size - per_group, (g + 1) * group_size):
            input_ids[row, P:] = pad
            input_ids[row, P : P + len(demo)] = torch.tensor(demo, dtype=input_ids.dtype)
            logp[row] = 0.0  # no engine log-probs: nothing sampled them (recompute gives the behaviour's)
            texts[row], finished[row] = answer, True
    rmask = response_mask_from(input_ids[:, P:], [eos_id]).to(gen.response_mask.dtype)
    keep = F.pad(gen.response_mask, (0, grow))
    sampled = torch.ones(input_ids.shape[0], dtype=torch.bool)
    for g in range(len(answers)):
        sampled[(g + 1) * group_size - per_group : (g + 1) * group_size] = False
    rmask = torch.where(sampled[:, None], keep, rmask)  # sampled rows keep their own mask (any EOS id)
    return Generation(
        input_ids=input_ids,
        attention_mask=attention,
        response_mask=rmask,
        logp=logp * rmask,
        prompt_len=P,
        texts=texts,
        finished=finished,
    )
