"""Rollouts, one path for both modes: `generate_batch` turns a step's problems into a scored batch
(generation, partial rollouts, demonstrations, rewards with their failure checks, behaviour
log-probs), and `rollout_engine` makes the engine that generates them. stale_k calls them through
`Rollouts` once per step; in async mode the generator process (async_gen.py) calls them in its own
loop, so a reward that fails is warned about, counted and fatal the same way in both."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

from trainer.policy.distributed import DistInfo, model_state_for_engine
from trainer.rollout import demonstrations
from trainer.rollout.batch import Batch, HFEngine, make_batch, recompute_behaviour_logp
from trainer.rollout.rewards import check_rewards
from trainer.telemetry.utilisation import state_bytes

log = logging.getLogger("trainer")


def rollout_engine(cfg, policy, device, precision, work_dir=None, dist: DistInfo | None = None, hf_engine=None):
    """The engine that generates training rollouts: vLLM if asked, else an HF engine (`hf_engine`
    when given: stale_k shares the one that evaluates). `work_dir` and `dist` place vLLM's starting
    folder and gather the weights across ranks (stale_k); the async generator passes neither."""
    if cfg.rollout.engine == "vllm":
        from trainer.rollout.vllm_engine import VLLMEngine  # lazily: nothing else needs vLLM

        # Every rank takes part (the full weights are gathered collectively); rank 0 writes the
        # folder, and each rank starts its own engine on its own device (vllm_engine.py says why).
        return VLLMEngine.from_policy(policy, cfg, work_dir=work_dir, dist_info=dist)
    return hf_engine if hf_engine is not None else HFEngine(policy, device, precision=precision)


class Swap:
    """Partial rollouts: `newer()` says newer weights were published, `load()` loads them and
    returns their version."""

    def __init__(self, newer, load):
        self.newer, self.load = newer, load


@dataclass
class BatchParts:
    """What every batch of a run is made with: `policy` gives the tokenizer (demonstrations),
    `model` on `device` scores a batch under `behav_logp: recompute`."""

    cfg: object
    task: object
    policy: object
    model: object
    device: object
    precision: object


def generate_batch(parts: BatchParts, engine, problems, version: int, gen_step: int, swap=None) -> Batch:
    """One batch of `problems` from the weights at `version`: generated (continued across weight
    swaps with `swap`, rollout.partial), with the task's demonstrations, scored and checked
    (trainer/rollout/rewards.py: failures counted, warned about, fatal when all of a step's failed), with
    behaviour log-probs."""
    cfg, task, policy = parts.cfg, parts.task, parts.policy
    roll = cfg.rollout
    t0 = time.perf_counter()
    prompts = [task.prompt_text(p) for p in problems]
    gen, partial = _generate(cfg, engine, prompts, version, swap, parts.precision)
    if cfg.task.demonstrations:  # a warm-up's stand-in for pretraining (trainer/rollout/demonstrations.py)
        answers, tok, eos = [p.answer for p in problems], policy.tokenizer, policy.eos_token_ids[0]
        gen = demonstrations.inject(gen, answers, tok, eos, roll.group_size, cfg.task.demonstrations)
    expanded = [p for p in problems for _ in range(roll.group_size)]
    rewards = task.train_rewards(expanded, gen.texts, gen.finished)
    check_rewards(rewards, f"generation step {gen_step}", log)
    rows = [(t, p.answer) for t, p in zip(prompts, problems) for _ in range(roll.group_size)]
    batch = make_batch(gen, rewards, version, roll.group_size, 0.0, problems=rows)
    if partial is not None:
        batch.token_version_offsets = partial.token_version_offsets
    if roll.behav_logp == "recompute":
        micro = cfg.train.micro_batch_size
        recompute_behaviour_logp(batch, parts.model, roll.temperature, micro, parts.device, parts.precision)
        if partial is not None:  # the whole-batch scores hold for the last version's tokens only
            from trainer.rollout.partial import merge_behaviour

            batch.behav_logp = merge_behaviour(batch.behav_logp, partial)
    batch.gen_seconds = time.perf_counter() - t0
    return batch


def _generate(cfg, engine, prompts, version: int, swap, precision) -> tuple:
    """(Generation, PartialGeneration or None): the plain engine's, or continued across swaps
    (trainer/rollout/partial.py on the HF engine, trainer/rollout/vllm_partial.py on vLLM)."""
    roll = cfg.rollout
    sampling = (prompts, roll.group_size, roll.max_new_tokens, roll.temperature, roll.top_p)
    if swap is None:
        return engine.generate(*sampling), None
    recompute = roll.behav_logp == "recompute"
    if roll.engine == "vllm":
        from trainer.rollout.vllm_partial import generate_partial_vllm

        partial = generate_partial_vllm(engine, *sampling, swap.newer, swap.load, version, recompute, precision)
    else:
        from trainer.rollout.partial import generate_partial

        partial = generate_partial(engine, *sampling, swap.newer, swap.load, version, recompute)
    return partial.generation, partial


def my_slice(items: list, dist: DistInfo) -> list:
    """This rank's equal share of a step's prompts (whole groups); check_world_size made sure
    the world size divides them, so nothing is dropped."""
    per = len(items) // dist.world
    return items[dist.rank * per : (dist.rank + 1) * per]


class Rollouts:
    """stale_k: one batch per step, each rank its slice of the step's prompts."""

    def __init__(self, parts: BatchParts, engine, dist: DistInfo, prompt_rng: random.Random):
        """`engine` generates; when it is not the policy's own HF engine (vLLM) it holds a copy of
        the weights, synced before each batch whose version moved on."""
        self.parts, self.cfg, self.task, self.model = parts, parts.cfg, parts.task, parts.model
        self.engine = engine
        self.separate = not isinstance(engine, HFEngine)
        self.dist = dist
        self.prompt_rng = prompt_rng  # the same on every rank; each takes its slice
        self.engine_version = -1  # the weights a separate engine (vLLM) holds
        self.weight_sync_s: float | None = None
        self.weight_sync_bytes = 0

    def generate(self, version: int, gen_step: int) -> Batch:
        """One batch from the weights at `version`, with rewards and behaviour log-probs."""
        t0 = time.perf_counter()
        problems = my_slice(self.task.sample(self.prompt_rng, self.cfg.rollout.prompts_per_step), self.dist)
        self._sync_weights(version)
        batch = generate_batch(self.parts, self.engine, problems, version, gen_step)
        batch.gen_seconds = time.perf_counter() - t0  # the weight sync included
        return batch

    def _sync_weights(self, version: int) -> None:
        """A separate engine (vLLM) gets the trainer's weights when they moved on."""
        if not self.separate or self.engine_version == version:
            return
        t_sync = time.perf_counter()
        state = model_state_for_engine(self.model, self.dist)
        self.weight_sync_bytes = state_bytes(state)
        self.engine.load_weights(state)
        self.engine_version = version
        self.weight_sync_s = time.perf_counter() - t_sync  # gather + hand-over + in-place load

    def take_weight_sync(self) -> dict[str, float]:
        """perf/weight_sync_s and _bytes of the sync this step did, if it did one (the vllm engine
        only); {} otherwise."""
        sync_s, self.weight_sync_s = self.weight_sync_s, None
        if sync_s is None:
            return {}
        return {"perf/weight_sync_s": sync_s, "perf/weight_sync_bytes": float(self.weight_sync_bytes)}

    def close(self) -> None:
        if self.separate and hasattr(self.engine, "close"):
            self.engine.close()  # the vLLM engine's processes
