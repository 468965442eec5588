"""Rollouts in stale_k mode: one batch from the current weights per call, scored, with behaviour
log-probs. (In async mode the generator process, async_gen.py, does the same on its own.)"""

from __future__ import annotations

import logging
import random
import time

from trainer import demonstrations
from trainer.distributed import DistInfo, model_state_for_engine
from trainer.rewards import check_rewards
from trainer.rollout import Batch, HFEngine, make_batch, recompute_behaviour_logp
from trainer.utilisation import state_bytes

log = logging.getLogger("trainer")


def rollout_engine(cfg, policy, eval_engine, run_dir, dist: DistInfo):
    """The engine that generates training rollouts in stale_k mode: vLLM if asked, else the HF
    engine that also evaluates."""
    if cfg.rollout.engine == "vllm":
        from trainer.vllm_engine import VLLMEngine  # lazily: nothing else needs vLLM

        # Every rank takes part (the full weights are gathered collectively); rank 0 writes the
        # folder, and each rank starts its own engine on its own device (vllm_engine.py says why).
        return VLLMEngine.from_policy(policy, cfg, work_dir=run_dir / "vllm_model", dist_info=dist)
    return eval_engine


def my_slice(items: list, dist: DistInfo) -> list:
    """This rank's equal share of a step's prompts (whole groups); check_world_size made sure
    the world size divides them, so nothing is dropped."""
    per = len(items) // dist.world
    return items[dist.rank * per : (dist.rank + 1) * per]


class Rollouts:
    def __init__(self, cfg, task, policy, model, engine, dist: DistInfo, precision, prompt_rng: random.Random):
        """`engine` generates; when it is not the policy's own HF engine (vLLM) it holds a copy of
        the weights, synced before each batch whose version moved on."""
        self.cfg, self.task, self.policy, self.model = cfg, task, policy, model
        self.engine = engine
        self.separate = not isinstance(engine, HFEngine)
        self.dist, self.precision = dist, precision
        self.prompt_rng = prompt_rng  # the same on every rank; each takes its slice
        self.engine_version = -1  # the weights a separate engine (vLLM) holds
        self.weight_sync_s: float | None = None
        self.weight_sync_bytes = 0

    def generate(self, version: int, gen_step: int) -> Batch:
        """One batch from the weights at `version`, with rewards and behaviour log-probs."""
        roll = self.cfg.rollout
        t0 = time.perf_counter()
        problems = my_slice(self.task.sample(self.prompt_rng, roll.prompts_per_step), self.dist)
        self._sync_weights(version)
        prompts = [self.task.prompt_text(p) for p in problems]
        gen = self.engine.generate(prompts, roll.group_size, roll.max_new_tokens, roll.temperature, roll.top_p)
        if self.cfg.task.demonstrations:  # a warm-up's stand-in for pretraining (trainer/demonstrations.py)
            answers, tok, eos = [p.answer for p in problems], self.policy.tokenizer, self.policy.eos_token_ids[0]
            gen = demonstrations.inject(gen, answers, tok, eos, roll.group_size, self.cfg.task.demonstrations)
        expanded = [p for p in problems for _ in range(roll.group_size)]
        rewards = self.task.train_rewards(expanded, gen.texts, gen.finished)
        check_rewards(rewards, f"generation step {gen_step}", log)
        rows = [(t, p.answer) for t, p in zip(prompts, problems) for _ in range(roll.group_size)]
        batch = make_batch(gen, rewards, version, roll.group_size, 0.0, problems=rows)
        if roll.behav_logp == "recompute":
            micro = self.cfg.train.micro_batch_size
            recompute_behaviour_logp(batch, self.model, roll.temperature, micro, self.dist.device, self.precision)
        batch.gen_seconds = time.perf_counter() - t0
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
