"""The training loop: generate, queue, train, evaluate, checkpoint, report.

stale_k (the paper's protocol): every loop iteration generates one batch with the current weights
and appends it to a FIFO of whole batches. Once the FIFO holds more than k batches, the oldest is
popped and trained on with U = updates_per_step x epochs optimizer updates. Nothing trains during
the first k iterations, so after the ramp the data is k*U .. k*U+U-1 updates stale.

async: a generator process (async_gen.py) produces batches concurrently; each batch that arrives
within max_staleness is trained on with U updates, and the weights are published every
sync_every updates.

Every sample carries the policy version (update count) of the weights that generated it, and
every training step logs rollout/staleness_{mean,min,max} in updates. Metrics are logged against
the optimizer update count.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import time
from collections import defaultdict, deque
from pathlib import Path

import numpy as np
import torch

from trainer import checkpoint as ckpt
from trainer.advantages import broadcast_to_tokens, grpo_advantages
from trainer.config import RunConfig, derive_sizes
from trainer.distributed import (
    barrier,
    full_state,
    init_distributed,
    load_full_state,
    mean_across,
    model_state_for_engine,
    shutdown,
    sum_across,
    wrap_fsdp,
)
from trainer.metric_keys import is_known
from trainer.models import load_policy
from trainer.objectives import policy_loss
from trainer.reporting import MetricSpool, Pusher, truncate_spool, write_offset
from trainer.rewards import MathVerifier
from trainer.rollout import Batch, HFEngine, make_batch, token_logprobs
from trainer.tasks import TEXT_ALPHABET, build_eval_sets, build_task

log = logging.getLogger("trainer")

EX_OK = 0
EX_TEMPFAIL = 75  # "stopped for requeue": the cluster's graceful-stop signal was honoured
EX_CANCELLED = 130  # cancelled by a person: checkpointed, not to be requeued (see cli.py)


class Trainer:
    def __init__(self, cfg: RunConfig, run_dir: Path, resume: bool = False):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.resume_asked = resume
        self.sizes = derive_sizes(cfg)
        self.U = self.sizes.updates_per_step
        self.stop_signal: int | None = None
        self.spool: MetricSpool | None = None
        self.pusher: Pusher | None = None
        self.async_gen = None
        self._verifiers: list[MathVerifier] = []

    # ----------------------------------------------------------------------------------------
    # setup
    # ----------------------------------------------------------------------------------------

    def setup(self) -> None:
        cfg = self.cfg
        self.dist = init_distributed(cfg.train.device)
        self.device = self.dist.device
        threads = cfg.train.torch_threads
        if not threads and cfg.staleness.mode == "async" and self.device.type == "cpu":
            threads = max(1, (os.cpu_count() or 2) // 2)  # the generator process takes the rest
        self.threads = threads
        if threads:
            torch.set_num_threads(threads)
        seed = cfg.train.seed
        random.seed(seed + self.dist.rank)
        np.random.seed(seed + self.dist.rank)
        torch.manual_seed(seed + self.dist.rank)
        self.prompt_rng = random.Random(seed)  # the same on every rank; each takes its slice
        self.shuffle_rng = random.Random(seed + 1)

        # Data before the model: a missing file fails before any model loads.
        self.task = build_task(cfg.task)
        self.eval_sets = build_eval_sets(cfg.task, self.task, self._new_verifier)
        self.alphabet = self.task.alphabet + (TEXT_ALPHABET if any(e.name != "arithmetic" for e in self.eval_sets) else "")
        # Reporting starts before the model loads, so the dashboard hears a heartbeat at once.
        resume_from = self._prepare_run_dir()

        self.policy = load_policy(cfg.model, self.alphabet, seed, self.device)
        self.model = wrap_fsdp(self.policy.model, self.dist)
        alg = cfg.algorithm
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=alg.lr, weight_decay=alg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.eval_engine = HFEngine(self.policy, self.device)
        # In async mode the generator process owns the rollout engine; the trainer only evaluates.
        self.engine = self._rollout_engine() if cfg.staleness.mode == "stale_k" else self.eval_engine

        self.version = 0  # optimizer updates applied so far
        self.train_step = 0
        self.gen_step = 0
        self.samples_seen = 0.0
        self.tokens_seen = 0.0
        self.queue: deque[Batch] = deque()
        self.engine_version = -1
        self.last_eval_version = -1
        self.last_ckpt_version = -1

        if resume_from is not None:
            self._restore(resume_from)
        print(f"[trainer] {'resumed at update ' + str(self.version) if resume_from else 'fresh start'}; derived sizes:", flush=True)
        for line in self.sizes.lines():
            print(f"[trainer]   {line}", flush=True)

    def _new_verifier(self) -> MathVerifier:
        v = MathVerifier(self.cfg.task.reward_workers, self.cfg.task.reward_timeout_s)
        self._verifiers.append(v)
        return v

    def _rollout_engine(self):
        if self.cfg.rollout.engine == "vllm":
            from trainer.vllm_engine import VLLMEngine  # lazily: nothing else needs vLLM

            return VLLMEngine.from_policy(self.policy, self.cfg, work_dir=self.run_dir / "vllm_model")
        return self.eval_engine

    def _lr_factor(self, update: int) -> float:
        alg = self.cfg.algorithm
        if alg.warmup_updates and update < alg.warmup_updates:
            return (update + 1) / alg.warmup_updates
        total = max(1, self.sizes.total_updates - alg.warmup_updates)
        progress = min(1.0, (update - alg.warmup_updates) / total)
        if alg.lr_schedule == "linear":
            return 1.0 - progress
        if alg.lr_schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    # ----------------------------------------------------------------------------------------
    # checkpoints and resume
    # ----------------------------------------------------------------------------------------

    def _prepare_run_dir(self) -> Path | None:
        """Decide fresh start or resume, make the spool match, and start reporting.

        Returns the checkpoint to resume from. A fresh start owns the folder: old checkpoints and
        metrics go. A resume from the checkpoint at update S cuts the spool after S.
        """
        latest = ckpt.latest_checkpoint(self.run_dir)
        attempt = self.cfg.reporting.attempt
        resume = (self.resume_asked or attempt > 1) and latest is not None
        if self.dist.is_main:
            if resume:
                truncate_spool(self.run_dir, ckpt.checkpoint_step(latest), attempt)
            elif self.run_dir.exists():
                shutil.rmtree(self.run_dir / ckpt.CKPT_DIR, ignore_errors=True)
                truncate_spool(self.run_dir, -1, attempt)
                write_offset(self.run_dir, 0, attempt)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "config.resolved.yaml").write_text(self.cfg.to_yaml())  # never the input file
            (self.run_dir / "derived.json").write_text(json.dumps(self.sizes.__dict__, indent=1))
            self.spool = MetricSpool(self.run_dir)
            self.pusher = Pusher(self.run_dir, self.cfg.reporting, self.sizes.total_updates)
            self.pusher.step = ckpt.checkpoint_step(latest) if resume else 0
            self.pusher.start()
        barrier(self.dist)
        return latest if resume else None

    def _restore(self, path: Path) -> None:
        state = ckpt.load_state(path)
        if state["config"]["model"] != self.cfg.model.model_dump(mode="json"):
            raise RuntimeError(f"cannot resume from {path}: the model section changed since it was written")
        load_full_state(self.model, self.optimizer, state["model"], state["optimizer"], self.dist)
        self.scheduler.load_state_dict(state["scheduler"])
        for name in ("version", "train_step", "gen_step", "samples_seen", "tokens_seen", "last_eval_version"):
            setattr(self, name, state[name])
        self.last_ckpt_version = self.version
        self.prompt_rng.setstate(state["prompt_rng"])
        self.shuffle_rng.setstate(state["shuffle_rng"])
        ckpt.set_rng_state(state["rng"][self.dist.rank])
        self.queue = deque(Batch.from_state(b) for b in ckpt.load_rank_queue(path, self.dist.rank))

    def save_checkpoint(self) -> None:
        stage = ckpt.staging_dir(self.run_dir, self.version)
        if self.dist.is_main:
            stage = ckpt.prepare_stage(self.run_dir, self.version)
        barrier(self.dist)
        ckpt.write_rank_queue(stage, self.dist.rank, [b.to_state() for b in self.queue])
        rng = [ckpt.rng_state()]
        if self.dist.enabled:
            gathered = [None] * self.dist.world
            torch.distributed.all_gather_object(gathered, rng[0])
            rng = gathered
        model_sd, optim_sd = full_state(self.model, self.optimizer, self.dist)
        barrier(self.dist)
        if self.dist.is_main:
            state = {
                "model": model_sd,
                "optimizer": optim_sd,
                "scheduler": self.scheduler.state_dict(),
                "version": self.version,
                "train_step": self.train_step,
                "gen_step": self.gen_step,
                "samples_seen": self.samples_seen,
                "tokens_seen": self.tokens_seen,
                "last_eval_version": self.last_eval_version,
                "prompt_rng": self.prompt_rng.getstate(),
                "shuffle_rng": self.shuffle_rng.getstate(),
                "rng": rng,
                "config": self.cfg.model_dump(mode="json"),
            }
            self.spool.sync()  # metrics up to this step are durable before the checkpoint is
            ckpt.commit(self.run_dir, stage, self.version, state, self.cfg.checkpoint.keep)
        barrier(self.dist)
        self.last_ckpt_version = self.version

    # ----------------------------------------------------------------------------------------
    # generation
    # ----------------------------------------------------------------------------------------

    def _my_slice(self, items: list) -> list:
        per = len(items) // self.dist.world
        return items[self.dist.rank * per : (self.dist.rank + 1) * per]

    def generate_batch(self) -> Batch:
        """One batch from the current weights (stale_k mode), with rewards and behaviour log-probs."""
        roll = self.cfg.rollout
        t0 = time.perf_counter()
        problems = self._my_slice(self.task.sample(self.prompt_rng, roll.prompts_per_step))
        if self.engine is not self.eval_engine and self.engine_version != self.version:
            self.engine.load_weights(model_state_for_engine(self.model, self.dist))
            self.engine_version = self.version
        gen = self.engine.generate([self.task.prompt_text(p) for p in problems], roll.group_size, roll.max_new_tokens, roll.temperature, roll.top_p)
        expanded = [p for p in problems for _ in range(roll.group_size)]
        rewards = self.task.train_rewards(expanded, gen.texts, gen.finished)
        batch = make_batch(gen, rewards, self.version, roll.group_size, 0.0)
        if roll.behav_logp == "recompute":  # the trainer's own copy of the behaviour weights: these
            with torch.no_grad():
                lp, _ = token_logprobs(self.model, batch.input_ids.to(self.device), batch.attention_mask.to(self.device), batch.prompt_len, roll.temperature)
            batch.rollout_logp = batch.behav_logp
            batch.behav_logp = lp.float().cpu() * batch.response_mask
        batch.gen_seconds = time.perf_counter() - t0
        return batch

    # ----------------------------------------------------------------------------------------
    # training
    # ----------------------------------------------------------------------------------------

    def _loss_params(self, rows: slice, mb: Batch, prox: torch.Tensor | None) -> dict:
        alg = self.cfg.algorithm
        params = {
            "tau_m2": alg.tau_m2,
            "budget": alg.tau_m2,
            "eps_low": alg.eps_low,
            "eps_high": alg.eps_high,
            "agg": alg.loss_agg,
            # Dr. GRPO's constant normaliser; without it a micro-batch's padded width is used.
            "max_response_len": self.cfg.rollout.max_new_tokens,
        }
        if alg.tis_cap is not None:
            params["tis_cap"] = alg.tis_cap
            params["rollout_logp"] = mb.rollout_logp[rows].to(self.device)
        if prox is not None:
            params["prox_logp"] = prox[rows].to(self.device)
        return params

    def _token_weighted(self) -> bool:
        agg = self.cfg.algorithm.loss_agg
        if agg is None:
            agg = "seq-mean-token-mean" if self.cfg.algorithm.objective == "gspo" else "token-mean"
        return agg == "token-mean"

    def update(self, mb: Batch, adv: torch.Tensor, prox: torch.Tensor | None) -> dict[str, float]:
        """One optimizer update on one minibatch, micro-batched if asked."""
        alg = self.cfg.algorithm
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        n = len(mb)
        micro = self.cfg.train.micro_batch_size or n
        total_tokens = mb.response_mask.sum().clamp(min=1.0)
        stats: dict[str, float] = defaultdict(float)
        lows, highs, entropy_sum = [], [], 0.0
        for start in range(0, n, micro):
            rows = slice(start, min(n, start + micro))
            rmask = mb.response_mask[rows].to(self.device)
            logp, ent = token_logprobs(self.model, mb.input_ids[rows].to(self.device), mb.attention_mask[rows].to(self.device), mb.prompt_len, self.cfg.rollout.temperature, with_entropy=True)
            adv_tok = broadcast_to_tokens(adv[rows].to(self.device), rmask)
            loss, part = policy_loss(alg.objective, logp, mb.behav_logp[rows].to(self.device), adv_tok, rmask, **self._loss_params(rows, mb, prox))
            weight = (rmask.sum() / total_tokens).item() if self._token_weighted() else (rmask.shape[0] / n)
            (loss * weight).backward()
            entropy_sum += (ent * rmask).sum().item()
            for k, v in part.items():
                stats[k] += v * weight
            lows.append(part.get("actor/ratio_min", math.nan))
            highs.append(part.get("actor/ratio_max", math.nan))
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), alg.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        stats["actor/ratio_min"] = min(lows)
        stats["actor/ratio_max"] = max(highs)
        stats["actor/grad_norm"] = float(grad_norm)
        stats["actor/entropy"] = entropy_sum / total_tokens.item()
        return stats

    def train_on(self, batch: Batch, on_update=None) -> dict[str, float]:
        """U optimizer updates on one batch: minibatches of whole groups, `epochs` passes."""
        alg = self.cfg.algorithm
        G = batch.group_size
        adv = grpo_advantages(batch.rewards, G, alg.adv_std_normalize, alg.adv_eps)
        n_groups = len(batch) // G
        per_mb = n_groups // alg.updates_per_step
        prox = None
        if alg.objective == "decoupled_ppo":  # AReaL's proximal policy: the weights before this step
            with torch.no_grad():
                prox, _ = token_logprobs(self.model, batch.input_ids.to(self.device), batch.attention_mask.to(self.device), batch.prompt_len, self.cfg.rollout.temperature)
                prox = prox.float().cpu()
        per_update: dict[str, list[float]] = defaultdict(list)
        staleness = []
        t0 = time.perf_counter()
        for _ in range(alg.epochs):
            order = list(range(n_groups))
            self.shuffle_rng.shuffle(order)
            for u in range(alg.updates_per_step):
                groups = order[u * per_mb : (u + 1) * per_mb]
                rows = torch.tensor([g * G + j for g in groups for j in range(G)])
                mb = batch.select(rows)
                staleness.append(self.version - mb.versions)
                stats = self.update(mb, adv[rows], None if prox is None else prox[rows])
                for k, v in stats.items():
                    per_update[k].append(v)
                self.version += 1
                if on_update is not None:
                    on_update(self.version)
        train_s = time.perf_counter() - t0
        metrics = {k: (min(v) if k.endswith("_min") else max(v) if k.endswith("_max") else float(np.mean(v))) for k, v in per_update.items()}
        metrics["actor/lr"] = self.scheduler.get_last_lr()[0]
        stale = torch.cat(staleness).float()
        lengths = batch.response_mask.sum(-1)
        metrics.update(
            {
                "rollout/staleness_mean": stale.mean().item(),
                "rollout/staleness_min": stale.min().item(),
                "rollout/staleness_max": stale.max().item(),
                "train/reward_mean": batch.rewards.mean().item(),
                "train/reward_std": batch.rewards.std().item() if len(batch) > 1 else 0.0,
                "train/solved_frac": (batch.rewards >= 1.0).float().mean().item(),
                "train/response_len_mean": lengths.mean().item(),
                "train/adv_abs_mean": adv.abs().mean().item(),
                "perf/train_s": train_s,
            }
        )
        if batch.rollout_logp is not None:
            metrics["rollout/engine_kl"] = ((batch.rollout_logp - batch.behav_logp) * batch.response_mask).sum().item() / max(1.0, batch.response_mask.sum().item())
        self.samples_seen += sum_across(float(len(batch)), self.dist)
        self.tokens_seen += sum_across(lengths.sum().item(), self.dist)
        return metrics

    # ----------------------------------------------------------------------------------------
    # evaluation
    # ----------------------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        ev = self.cfg.eval
        out = {}
        for es in self.eval_sets:
            problems = self._my_slice(es.problems) or es.problems[:1]
            gen = self.eval_engine.generate([es.prompt_text(p) for p in problems], ev.samples_per_problem, ev.max_new_tokens or self.cfg.rollout.max_new_tokens, ev.temperature, ev.top_p)
            expanded = [p for p in problems for _ in range(ev.samples_per_problem)]
            scores = es.score(expanded, gen.texts, gen.finished)
            out[f"eval/{es.name}/acc"] = float(np.mean(scores))
        out = mean_across(out, self.dist)
        if out:
            out["eval/avg_acc"] = float(np.mean(list(out.values())))
        self.last_eval_version = self.version
        return out

    # ----------------------------------------------------------------------------------------
    # the loop
    # ----------------------------------------------------------------------------------------

    def log(self, values: dict[str, float]) -> None:
        unknown = [k for k in values if not is_known(k)]
        if unknown:
            raise KeyError(f"metric keys missing from trainer/metric_keys.py: {unknown}")
        if self.spool is not None:
            self.spool.log(self.version, values)
        if self.pusher is not None:
            self.pusher.step = self.version

    def _due(self, every: int, last: int) -> bool:
        return every > 0 and self.version // every > last // every

    def finish_step(self, metrics: dict[str, float], step_start: float) -> None:
        self.train_step += 1
        step_s = time.perf_counter() - step_start
        trained_tokens = metrics.pop("_tokens")
        trained_samples = metrics.pop("_samples")
        metrics.update(
            {
                "perf/step_s": step_s,
                "perf/tokens_per_s": trained_tokens / step_s,
                "perf/samples_per_s": trained_samples / step_s,
                "train/samples_seen": self.samples_seen,
                "train/tokens_seen": self.tokens_seen,
                "train/train_step": float(self.train_step),
            }
        )
        metrics = mean_across(metrics, self.dist)
        self.log(metrics)
        if self.dist.is_main:
            print(
                f"[trainer] update {self.version:5d} step {self.train_step}/{self.cfg.train.steps} "
                f"reward {metrics['train/reward_mean']:.3f} staleness {metrics['rollout/staleness_min']:.0f}-{metrics['rollout/staleness_max']:.0f} "
                f"len {metrics['train/response_len_mean']:.1f} {step_s:.2f}s",
                flush=True,
            )
        if self._due(self.cfg.eval.every, self.last_eval_version):
            self.log(self.evaluate())
        if self._due(self.cfg.checkpoint.every, self.last_ckpt_version):
            self.save_checkpoint()

    def run(self) -> int:
        try:
            self.setup()
            if self.version == 0 and self.cfg.eval.at_start and self.last_eval_version < 0 and self.eval_sets:
                self.log(self.evaluate())
            if self.cfg.staleness.mode == "stale_k":
                code = self._run_stale_k()
            else:
                code = self._run_async()
            if code != EX_OK:
                return code
            if self.eval_sets and self.last_eval_version != self.version:
                self.log(self.evaluate())
            if self.last_ckpt_version != self.version:
                self.save_checkpoint()
            return EX_OK
        finally:
            self.close()

    def _stop(self) -> int:
        # cli.py sets stop_cancelled: a person's cancel (exit 130) versus the cluster's stop (75)
        if getattr(self, "stop_cancelled", False):
            print(f"[trainer] signal {self.stop_signal}: cancelled; checkpointing at update {self.version} and exiting", flush=True)
            self.save_checkpoint()
            return EX_CANCELLED
        print(f"[trainer] signal {self.stop_signal}: checkpointing at update {self.version} and stopping for requeue", flush=True)
        self.save_checkpoint()
        return EX_TEMPFAIL

    def _run_stale_k(self) -> int:
        k = self.cfg.staleness.k
        while self.train_step < self.cfg.train.steps:
            if self.stop_signal is not None:
                return self._stop()
            t0 = time.perf_counter()
            fresh = self.generate_batch()
            self.queue.append(fresh)
            self.gen_step += 1
            if len(self.queue) <= k:
                continue  # warm-up: nothing trains during the first k steps
            batch = self.queue.popleft()
            metrics = self.train_on(batch)
            metrics.update(
                {
                    "rollout/reward_mean": fresh.rewards.mean().item(),
                    "rollout/queue_batches": float(len(self.queue)),
                    "perf/gen_s": fresh.gen_seconds,
                    "_tokens": sum_across(batch.response_mask.sum().item(), self.dist),
                    "_samples": sum_across(float(len(batch)), self.dist),
                }
            )
            self.finish_step(metrics, t0)
        return EX_OK

    def _run_async(self) -> int:
        from trainer.async_gen import AsyncGenerator

        if self.dist.enabled:
            raise RuntimeError("staleness.mode async runs as one training process; use stale_k under torchrun")
        st = self.cfg.staleness
        gen = self.async_gen = AsyncGenerator(
            self.cfg, self.alphabet, self.model, self.version, self.cfg.train.seed + 1000 * (1 + self.version), self.device, self.threads
        )
        dropped = 0.0
        while self.train_step < self.cfg.train.steps:
            if self.stop_signal is not None:
                return self._stop()
            t0 = time.perf_counter()
            state, wait_s = gen.next_batch(lambda: self.stop_signal is not None)
            if state is None:
                continue
            batch = Batch.from_state(state)
            worst = self.version + self.U - 1 - int(batch.versions.min())
            if worst > st.max_staleness:  # admission should make this impossible; never train on it
                gen.take(trains=False, version=self.version)
                dropped += len(batch)
                continue
            gen.take(trains=True, version=self.version)
            metrics = self.train_on(batch, on_update=lambda v: gen.maybe_sync(self.model, v))
            metrics.update(
                {
                    "rollout/reward_mean": batch.rewards.mean().item(),
                    "rollout/queue_batches": float(gen.queued()),
                    "rollout/dropped_frac": dropped / (dropped + len(batch)),
                    "perf/gen_s": batch.gen_seconds,
                    "perf/wait_s": wait_s,
                    "_tokens": batch.response_mask.sum().item(),
                    "_samples": float(len(batch)),
                }
            )
            dropped = 0.0
            self.finish_step(metrics, t0)
        return EX_OK

    def close(self) -> None:
        if self.async_gen is not None:
            self.async_gen.close()
            self.async_gen = None
        for v in self._verifiers:
            v.close()
        if getattr(self, "task", None) is not None:
            self.task.close()
        if self.pusher is not None:
            self.pusher.close()
            self.pusher = None
        if self.spool is not None:
            self.spool.close()
            self.spool = None
        if getattr(self, "dist", None) is not None:
            shutdown(self.dist)
