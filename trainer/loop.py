"""The training loop: generate, queue, train, evaluate, checkpoint, report.

stale_k (the paper's protocol): every loop iteration generates one batch with the current weights
and appends it to a FIFO of whole batches. Once the FIFO holds more than k batches, the oldest is
popped and trained on with U = updates_per_step x epochs optimizer updates. Nothing trains during
the first k iterations; after them every batch is s = k x U updates stale.

async: a generator process (rollout/async_gen.py) produces batches concurrently; each batch that arrives
within max_staleness is trained on with U updates, and the weights are published every
sync_every updates.

Staleness, one definition (docs/GUIDE.md, "Steps, updates and staleness"): the optimizer updates between
the weights that generated a rollout and the weights its training step starts from. Every sample
carries the policy version (update count) of the weights that generated it; every training step
logs rollout/staleness_{mean,min,max}, and the samples and the progress line show the same number.
Metrics are logged against the optimizer update count.

`Trainer` only composes the parts, each a module of its own (trainer/__init__.py says where).
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections import deque
from functools import partial
from pathlib import Path

import numpy as np
import torch

from trainer.algo.counterfactual import run_variant
from trainer.ckpt.checkpoint import checkpoint_step
from trainer.ckpt.checkpointer import Checkpointer, prepare_run_dir
from trainer.config import RunConfig, check_world_size, collective_timeout_s, derive_sizes
from trainer.data.evaluation import Evaluator
from trainer.data.tasks import build_eval_sets, build_task, tokenizer_alphabet
from trainer.policy.distributed import (
    barrier,
    init_distributed,
    max_across,
    mean_across,
    shutdown,
    sum_across,
    wrap_fsdp,
)
from trainer.policy.models import load_policy
from trainer.policy.precision import Precision
from trainer.policy.update import Updater
from trainer.progress import Progress
from trainer.rollout.batch import Batch, HFEngine
from trainer.rollout.generation import BatchParts, Rollouts, rollout_engine
from trainer.rollout.rewards import MathVerifier, RewardFailure  # noqa: F401 (cli.py imports RewardFailure from here)
from trainer.stopping import EX_CANCELLED, EX_OK, EX_TEMPFAIL, StopProtocol, StopRequest  # noqa: F401
from trainer.telemetry.metric_log import MetricLog
from trainer.telemetry.samples import SampleRecorder
from trainer.telemetry.utilisation import async_utilisation, stale_k_utilisation

log = logging.getLogger("trainer")


class Trainer:
    def __init__(self, cfg: RunConfig, run_dir: Path, resume: bool = False, stop: StopRequest | None = None):
        """`stop` is what the signal handlers write into (cli.py); a fresh one when none is given."""
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.resume_asked = resume
        self.stop_request = stop if stop is not None else StopRequest()
        self.sizes = derive_sizes(cfg)
        self.U = self.sizes.updates_per_step
        self.progress = Progress()
        self.queue: deque[Batch] = deque()
        self.metric_log = MetricLog()
        self.samples: SampleRecorder | None = None  # rank 0 only
        self.dist = self.task = self.rollouts = self.async_feed = None
        self._verifiers: list[MathVerifier] = []

    @property
    def version(self) -> int:
        return self.progress.version

    # ---- setup --------------------------------------------------------------------------------

    def setup(self) -> None:
        cfg = self.cfg
        self.dist = init_distributed(cfg.train.device, collective_timeout_s(cfg))
        self.device = self.dist.device
        check_world_size(cfg, self.dist.world)  # before any data, model or generation
        self.precision = Precision(cfg.model.dtype, self.device, self.dist.enabled)
        self.stopper = StopProtocol(self.stop_request, lambda level: max_across(level, self.dist))
        self._seed()
        # Data before the model: a missing file fails before any model loads.
        self.task = build_task(cfg.task)
        self.eval_sets = build_eval_sets(cfg.task, self.task, self._new_verifier)
        self.alphabet = tokenizer_alphabet(self.task, self.eval_sets)
        # Reporting starts before the model loads, so the dashboard hears a heartbeat at once.
        resume_from = prepare_run_dir(cfg, self.run_dir, self.sizes, self.resume_asked, self.dist)
        if self.dist.is_main:
            start = checkpoint_step(resume_from) if resume_from is not None else 0
            self.metric_log.start(self.run_dir, cfg.reporting, self.sizes.total_updates, start)
        barrier(self.dist)
        self._build_parts()
        if resume_from is not None:
            self.checkpointer.restore(resume_from)
        elif cfg.init.enabled:
            self.checkpointer.warm_start()
        how = f"resumed at update {self.version}" if resume_from else "fresh start"
        print(f"[trainer] {how}; derived sizes:", flush=True)
        for line in self.sizes.lines():
            print(f"[trainer]   {line}", flush=True)

    def _seed(self) -> None:
        cfg, rank = self.cfg, self.dist.rank
        threads = cfg.train.torch_threads
        if not threads and cfg.staleness.mode == "async" and self.device.type == "cpu":
            threads = max(1, (os.cpu_count() or 2) // 2)  # the generator process takes the rest
        self.threads = threads
        if threads:
            torch.set_num_threads(threads)
        seed = cfg.train.seed
        random.seed(seed + rank)
        np.random.seed(seed + rank)
        torch.manual_seed(seed + rank)
        self.prompt_rng = random.Random(seed)  # the same on every rank; each takes its slice
        self.shuffle_rng = random.Random(seed + 1)

    def _build_parts(self) -> None:
        """The model, then the collaborators that share it."""
        cfg = self.cfg
        self.policy = load_policy(cfg.model, self.alphabet, cfg.train.seed, self.device)
        if self.dist.is_main:
            tok, eos, objective = self.policy.tokenizer, self.policy.eos_token_ids, cfg.algorithm.objective
            variant = run_variant(cfg.algorithm)
            self.samples = SampleRecorder(cfg.samples, self.run_dir, tok, eos, objective, variant)
        self.model = wrap_fsdp(self.policy.model, self.dist, self.precision.fsdp_policy())
        self.updater = Updater(
            cfg, self.model, self.dist, self.precision, self.sizes, self.progress, self.shuffle_rng, self.samples
        )
        # Decision positions index character tokens: only the tiny model's tokenizer has them.
        self.updater.decision_positions = self.task.decision_positions() if cfg.model.name == "tiny" else None
        self.optimizer = self.updater.optimizer
        eval_engine = HFEngine(self.policy, self.device, precision=self.precision)
        self.evaluator = Evaluator(cfg, self.eval_sets, eval_engine, self.dist, self.samples)
        if cfg.staleness.mode == "stale_k":  # in async mode the generator process owns the rollout engine
            where = {"work_dir": self.run_dir / "vllm_model", "dist": self.dist, "hf_engine": eval_engine}
            engine = rollout_engine(cfg, self.policy, self.device, self.precision, **where)
            parts = BatchParts(cfg, self.task, self.policy, self.model, self.device, self.precision)
            self.rollouts = Rollouts(parts, engine, self.dist, self.prompt_rng)
        rngs = {"prompt_rng": self.prompt_rng, "shuffle_rng": self.shuffle_rng}
        self.checkpointer = Checkpointer(
            cfg, self.run_dir, self.dist, self.updater, self.progress, rngs, self.queue, self.metric_log, self.samples
        )

    def _new_verifier(self) -> MathVerifier:
        v = MathVerifier(self.cfg.task.reward_workers, self.cfg.task.reward_timeout_s)
        self._verifiers.append(v)
        return v

    # ---- the loop -----------------------------------------------------------------------------

    def run(self) -> int:
        failed = False
        try:
            self.setup()
            p = self.progress
            if p.version == 0 and self.cfg.eval.at_start and p.last_eval_version < 0 and self.eval_sets:
                self.evaluate()
            code = self._run_stale_k() if self.cfg.staleness.mode == "stale_k" else self._run_async()
            if code != EX_OK:
                self.checkpointer.settle()  # the stop's checkpoint (or the last step's) commits before the exit
                return code
            if self.eval_sets and p.last_eval_version != p.version:
                self.evaluate()
            if p.last_ckpt_version != p.version:
                self.checkpointer.save()
            self.checkpointer.settle()  # a background checkpoint commits before the run ends
            return EX_OK
        except BaseException:
            failed = True
            raise
        finally:
            self.close(failed)

    def _run_stale_k(self) -> int:
        p = self.progress
        while p.train_step < self.cfg.train.steps:
            if self.stopper.due():
                return self.stopper.finish(p.version, self.checkpointer.save)
            t0 = time.perf_counter()
            fresh = self.rollouts.generate(p.version, p.gen_step)
            self.queue.append(fresh)
            p.gen_step += 1
            if len(self.queue) <= self.cfg.staleness.k:
                continue  # warm-up: nothing trains during the first k steps
            batch = self.queue.popleft()
            metrics = self.updater.train_on(batch)
            sync = self.rollouts.take_weight_sync()
            metrics.update(
                {
                    "rollout/reward_mean": fresh.rewards.mean().item(),
                    "rollout/queue_batches": float(len(self.queue)),
                    "perf/gen_s": fresh.gen_seconds,
                    **sync,
                }
            )
            tokens = sum_across(batch.response_mask.sum().item(), self.dist)
            generated = sum_across(fresh.response_mask.sum().item(), self.dist)
            times = (fresh.gen_seconds, metrics["perf/train_s"], generated, tokens, sync)
            utilisation = partial(stale_k_utilisation, *times)
            self.finish_step(metrics, t0, tokens, sum_across(float(len(batch)), self.dist), utilisation)
        return EX_OK

    def _run_async(self) -> int:
        from trainer.rollout.async_feed import AsyncFeed

        p = self.progress  # a fresh start seeds the generator as stale_k (async_feed.generator_seed)
        feed = AsyncFeed(self.cfg, self.alphabet, self.model, self.dist, p.version, self.threads)
        self.async_feed = feed
        while p.train_step < self.cfg.train.steps:
            if self.stopper.due():
                return self.stopper.finish(p.version, self.checkpointer.save)
            t0 = time.perf_counter()
            got = feed.next(p.version, lambda: self.stop_request.asked)
            if got.batch is None:
                continue
            batch = got.batch
            metrics = self.updater.train_on(batch, on_update=feed.on_update)
            metrics.update(got.metrics(self.cfg))
            tokens = sum_across(batch.response_mask.sum().item(), self.dist)
            times = (got.wait_s, metrics["perf/train_s"], tokens, got.gen_time, feed.take_publish())
            utilisation = partial(async_utilisation, *times)
            self.finish_step(metrics, t0, tokens, sum_across(float(len(batch)), self.dist), utilisation)
        return EX_OK

    def finish_step(self, metrics: dict, step_start: float, tokens: float, samples: float, utilisation=None) -> None:
        """The step's metrics logged and printed; then evaluation and a checkpoint when due.
        `utilisation(step_s)`: the step's utilisation keys (trainer/telemetry/utilisation.py)."""
        p = self.progress
        p.train_step += 1
        step_s = time.perf_counter() - step_start
        if utilisation is not None:
            metrics.update(utilisation(step_s))
        metrics.update(
            {
                "perf/step_s": step_s,
                "perf/tokens_per_s": tokens / step_s,
                "perf/samples_per_s": samples / step_s,
                "train/samples_seen": p.samples_seen,
                "train/tokens_seen": p.tokens_seen,
                "train/train_step": float(p.train_step),
            }
        )
        metrics = mean_across(metrics, self.dist)  # every rank's keys must match here
        metrics.update(self.metric_log.failure_counts())
        self.log(metrics)
        if self.dist.is_main:
            print(self._progress_line(metrics, step_s), flush=True)
        if p.due(self.cfg.eval.every, p.last_eval_version):
            self.evaluate()
        self.checkpointer.settle()  # the last step's background checkpoint, if any, commits here
        if p.due(self.cfg.checkpoint.every, p.last_ckpt_version):
            self.checkpointer.save()

    def _progress_line(self, metrics: dict[str, float], step_s: float) -> str:
        p = self.progress
        low, high = round(metrics["rollout/staleness_min"]), round(metrics["rollout/staleness_max"])
        staleness = f"{low}" if low == high else f"{low}-{high}"
        return (
            f"[trainer] update {p.version}/{self.sizes.total_updates} "
            f"(training step {p.train_step}/{self.cfg.train.steps}) reward {metrics['train/reward_mean']:.3f} "
            f"staleness {staleness} len {metrics['train/response_len_mean']:.1f} {step_s:.2f}s"
        )

    def evaluate(self) -> None:
        self.log(self.evaluator.evaluate(self.progress.version))
        self.progress.last_eval_version = self.progress.version

    def log(self, values: dict[str, float]) -> None:
        self.metric_log.log(self.progress.version, values)  # raises on a key metric_keys.py lacks
        self.progress.last_values.update(values)

    def close(self, failed: bool = False) -> None:
        """`failed`: leave at once (no teardown barrier: a peer may be waiting in another collective)."""
        if self.rollouts is not None:
            self.rollouts.close()  # the vLLM engine's processes
        if self.async_feed is not None:
            self.async_feed.close(failed)
            self.async_feed = None
        for v in self._verifiers:
            v.close()
        if self.task is not None:
            self.task.close()
        self.metric_log.close()
        if self.samples is not None:
            self.samples.close()
        if self.dist is not None:
            shutdown(self.dist, clean=not failed)
