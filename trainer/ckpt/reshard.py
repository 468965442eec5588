"""Resuming on another number of training processes: the per-rank parts of a checkpoint, re-dealt.

The weights and optimizer reshard by themselves (DCP reads each rank's slices; a gathered
weights.pt is sharded as it loads). Two parts of a checkpoint are per rank and need a decision:

- The stale-k queue (queue-rank<r>.pt): rank r's queued batch i is rank r's contiguous slice of
  the prompts of generation step i (rollout/generation.py, `_my_share`), whole groups. Concatenating the
  old ranks' batch i in rank order gives back the step's whole batch; it is then cut into the new
  world's contiguous slices, exactly as if the new world had generated it. The same samples train,
  with their behaviour log-probs and policy versions, so the staleness of the resumed steps is
  unchanged. Prompts and responses are re-padded to the widest rank's (as rollout._concat does).
  The reward failure counts of a queued batch go to the new rank 0 (their sum is kept).
  Refused, with the reason, when the old ranks' queues differ in length or a step's batch does not
  split into whole groups for the new world.
- The RNG states of torch, python and numpy on each rank (sampling in generation): a rank of a new
  world has no saved stream of its own, and reusing old ranks' streams for other slices would
  make the run neither the old one nor a fresh one. So on a world-size change every rank derives
  its streams from (train.seed, rank, update): reproducible for the same resume, different per rank.
  The data order (prompt_rng, shuffle_rng) is the same on every rank and restored exactly.
"""

from __future__ import annotations

import random

import numpy as np
import torch
import torch.nn.functional as F

from trainer.rollout.batch import Batch


class ReshardError(RuntimeError):
    """A checkpoint's per-rank state that cannot be re-dealt to the new world honestly."""


def _pad_value(batch: Batch) -> int:
    """The pad id the batch was built with: what sits under its left padding (0 when none)."""
    left = batch.attention_mask == 0
    return int(batch.input_ids[left][0]) if left.any() else 0


def _widened(batch: Batch, prompt_len: int, response_len: int, pad: int) -> dict:
    lp, rp = prompt_len - batch.prompt_len, response_len - (batch.input_ids.shape[1] - batch.prompt_len)
    state = batch.to_state()
    state["input_ids"] = F.pad(batch.input_ids, (lp, rp), value=pad)
    state["attention_mask"] = F.pad(F.pad(batch.attention_mask, (lp, 0), value=0), (0, rp), value=1)
    for name in ("response_mask", "behav_logp", "rollout_logp"):
        if state[name] is not None:
            state[name] = F.pad(state[name], (0, rp))
    state["prompt_len"] = prompt_len
    return state


def join_batches(parts: list[Batch]) -> Batch:
    """The old ranks' slices of one generation step, in rank order, as one batch."""
    P = max(b.prompt_len for b in parts)
    R = max(b.input_ids.shape[1] - b.prompt_len for b in parts)
    pad = _pad_value(next((b for b in parts if (b.attention_mask == 0).any()), parts[0]))
    states = [_widened(b, P, R, pad) for b in parts]
    joined = dict(states[0])
    for name, value in states[0].items():
        if isinstance(value, torch.Tensor):
            joined[name] = torch.cat([s[name] for s in states])
        elif isinstance(value, list):
            joined[name] = [x for s in states for x in s[name]]
    joined["gen_seconds"] = max(b.gen_seconds for b in parts)
    joined["reward_errors"] = sum(b.reward_errors for b in parts)
    joined["reward_timeouts"] = sum(b.reward_timeouts for b in parts)
    return Batch.from_state(joined)


def _slice(batch: Batch, rank: int, world: int) -> Batch:
    rows = len(batch)
    groups = rows // batch.group_size
    if rows % batch.group_size or groups % world:
        raise ReshardError(
            f"a queued batch of {groups} prompt groups cannot be shared equally by {world} training processes"
        )
    per = rows // world
    part = batch.select(torch.arange(rank * per, (rank + 1) * per))
    if rank:
        part.reward_errors = part.reward_timeouts = 0
    return part


def reshard_queue(saved: list[list[dict]], rank: int, world: int) -> list[Batch]:
    """This rank's queue in a world of `world` processes, from every old rank's saved queue."""
    lengths = {len(q) for q in saved}
    if len(lengths) > 1:
        raise ReshardError(f"the old ranks' stale queues differ in length ({sorted(lengths)}): no common step to join")
    steps = zip(*[[Batch.from_state(b) for b in q] for q in saved])
    return [_slice(join_batches(list(parts)), rank, world) for parts in steps]


def derived_rng_state(seed: int, rank: int, version: int) -> None:
    """Seed this rank's torch, python and numpy streams from (seed, rank, update)."""
    mixed = random.Random(f"{seed}/{rank}/{version}").getrandbits(63)
    random.seed(mixed)
    np.random.seed(mixed % 2**32)
    torch.manual_seed(mixed)
