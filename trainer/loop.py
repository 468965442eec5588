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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainer import checkpoint as ckpt
from trainer import demonstrations
from trainer.advantages import broadcast_to_tokens, grpo_advantages
from trainer.config import ConfigError, RunConfig, check_world_size, derive_sizes
from trainer.counterfactual import counterfactual_variants, run_variant
from trainer.diagnostics import engine_diagnostics, update_diagnostics
from trainer.distributed import (
    barrier,
    full_state,
    init_distributed,
    load_full_state,
    max_across,
    mean_across,
    model_state_for_engine,
    shutdown,
    sum_across,
    wrap_fsdp,
)
from trainer.m2po_scope import minibatch_m2po_keep
from trainer.metric_keys import is_known
from trainer.models import load_policy
from trainer.objectives import policy_loss_marked
from trainer.precision import Precision
from trainer.reporting import MetricSpool, Pusher, truncate_spool, write_offset
from trainer.rewards import MathVerifier, RewardBatch
from trainer.rollout import (
    Batch,
    HFEngine,
    make_batch,
    micro_batched_logprobs,
    recompute_behaviour_logp,
    token_logprobs,
)
from trainer.run_markers import NO_CHECKPOINT_MARKER
from trainer.samples import SampleRecorder, train_due
from trainer.system_metrics import SystemSampler
from trainer.tasks import build_eval_sets, build_task, tokenizer_alphabet
from trainer.token_classes import TokenClassTally

log = logging.getLogger("trainer")

EX_OK = 0
EX_TEMPFAIL = 75  # "stopped for requeue": the cluster's graceful-stop signal was honoured


EX_CANCELLED = 130  # cancelled by a person: checkpointed, not to be requeued (see cli.py)


@dataclass(frozen=True)
class _Seen:
    """One micro-batch as its loss saw it (detached): for the diagnostics and the counterfactual marks."""

    rows: slice
    logp: torch.Tensor | None  # (b, T); kept only on the recorded update
    behav: torch.Tensor
    adv_tok: torch.Tensor
    rmask: torch.Tensor
    log_r: torch.Tensor
    params: dict
    rollout: torch.Tensor | None  # (b, T) the engine's log-probs, when the batch has them


class RewardFailure(RuntimeError):
    """Every reward of a step failed: training on all-zero rewards would be silently wrong."""


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
        self.system: SystemSampler | None = None
        self.samples: SampleRecorder | None = None  # rank 0 only
        self.async_gen = None
        self._verifiers: list[MathVerifier] = []

    # ----------------------------------------------------------------------------------------
    # setup
    # ----------------------------------------------------------------------------------------

    def setup(self) -> None:
        cfg = self.cfg
        self.dist = init_distributed(cfg.train.device)
        self.device = self.dist.device
        check_world_size(cfg, self.dist.world)  # before any data, model or generation
        self.precision = Precision(cfg.model.dtype, self.device, self.dist.enabled)
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
        self.alphabet = tokenizer_alphabet(self.task, self.eval_sets)
        # Decision positions index character tokens: only the tiny model's tokenizer has them.
        self.decision_positions = self.task.decision_positions() if cfg.model.name == "tiny" else None
        # Reporting starts before the model loads, so the dashboard hears a heartbeat at once.
        resume_from = self._prepare_run_dir()

        self.policy = load_policy(cfg.model, self.alphabet, seed, self.device)
        if self.dist.is_main:
            self.samples = SampleRecorder(
                cfg.samples,
                self.run_dir,
                self.policy.tokenizer,
                self.policy.eos_token_ids,
                cfg.algorithm.objective,
                run_variant(cfg.algorithm),
            )
        self._recording = False  # every rank: the update being run is the one rank 0 records
        self.model = wrap_fsdp(self.policy.model, self.dist, self.precision.fsdp_policy())
        alg = cfg.algorithm
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=alg.lr, weight_decay=alg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.eval_engine = HFEngine(self.policy, self.device, precision=self.precision)
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
        self.last_values: dict[str, float] = {}  # each metric's last value: what "best checkpoint" is judged on

        if resume_from is not None:
            self._restore(resume_from)
        elif cfg.init.enabled:
            self._warm_start()
        print(
            f"[trainer] {'resumed at update ' + str(self.version) if resume_from else 'fresh start'}; derived sizes:",
            flush=True,
        )
        for line in self.sizes.lines():
            print(f"[trainer]   {line}", flush=True)

    def _new_verifier(self) -> MathVerifier:
        v = MathVerifier(self.cfg.task.reward_workers, self.cfg.task.reward_timeout_s)
        self._verifiers.append(v)
        return v

    def _rollout_engine(self):
        if self.cfg.rollout.engine == "vllm":
            from trainer.vllm_engine import VLLMEngine  # lazily: nothing else needs vLLM

            # Every rank takes part (the full weights are gathered collectively); rank 0 writes the
            # folder, and each rank starts its own engine on its own device (vllm_engine.py says why).
            return VLLMEngine.from_policy(
                self.policy, self.cfg, work_dir=self.run_dir / "vllm_model", dist_info=self.dist
            )
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
            (self.run_dir / NO_CHECKPOINT_MARKER).unlink(missing_ok=True)  # an earlier attempt's cancel
            (self.run_dir / "config.resolved.yaml").write_text(self.cfg.to_yaml())  # never the input file
            (self.run_dir / "derived.json").write_text(json.dumps(self.sizes.__dict__, indent=1))
            self.spool = MetricSpool(self.run_dir)
            self.pusher = Pusher(self.run_dir, self.cfg.reporting, self.sizes.total_updates)
            self.pusher.step = ckpt.checkpoint_step(latest) if resume else 0
            self.pusher.start()
            # At the steps the trainer logs (the pusher's), from after the start: a point at 0 on a
            # resume would start the new attempt at 0 (ingestion supersedes an older attempt's
            # points from there), and one at the start step could repeat a point the spool kept.
            self.system = SystemSampler(
                self.cfg.reporting.system_s, self.spool.log, lambda: self.pusher.step, after_step=self.pusher.step
            )
            self.system.start()
        barrier(self.dist)
        return latest if resume else None

    def _restore(self, path: Path) -> None:
        state = ckpt.load_state(path)
        if not ckpt.same_weights_shape(state["config"]["model"], self.cfg.model):
            raise RuntimeError(f"cannot resume from {path}: the model section changed since it was written")
        self._load_weights(path, with_optimizer=True)
        self.scheduler.load_state_dict(state["scheduler"])
        self.precision.load_state_dict(state.get("precision"))
        for name in ("version", "train_step", "gen_step", "samples_seen", "tokens_seen", "last_eval_version"):
            setattr(self, name, state[name])
        self.last_ckpt_version = self.version
        self.last_values = dict(ckpt.read_meta(path).get("metrics", {}))
        self.prompt_rng.setstate(state["prompt_rng"])
        self.shuffle_rng.setstate(state["shuffle_rng"])
        ckpt.set_rng_state(state["rng"][self.dist.rank])
        self.queue = deque(Batch.from_state(b) for b in ckpt.load_rank_queue(path, self.dist.rank))

    def _warm_start(self) -> None:
        """Start from another run's checkpoint: its weights, and its optimizer state if asked.
        Counters, schedule and data order start afresh: this is a new run."""
        init = self.cfg.init
        if init.from_path is None:
            raise ConfigError(
                [
                    (
                        "init.from_run",
                        "the dashboard resolves a run to its checkpoint folder; running the trainer by hand, set init.from_path",
                    )
                ]
            )
        try:
            path = ckpt.find_init_checkpoint(init.from_path, init.from_step)
        except FileNotFoundError as exc:
            field, _, reason = str(exc).partition(": ")
            raise ConfigError([(field, reason)]) from None
        try:
            state = ckpt.load_state(path)
        except ckpt.CheckpointError as exc:
            raise ConfigError([("init.from_path", str(exc))]) from None
        if not ckpt.same_weights_shape(state["config"]["model"], self.cfg.model):
            raise ConfigError(
                [("init.from_path", f"{path} holds weights of another model ({state['config']['model'].get('name')})")]
            )
        self._load_weights(path, with_optimizer=init.optimizer)
        if self.dist.is_main:
            print(
                f"[trainer] warm start from {path} (update {ckpt.checkpoint_step(path)}; {'weights and optimizer' if init.optimizer else 'weights, fresh optimizer'})",
                flush=True,
            )

    def _load_weights(self, path: Path, with_optimizer: bool) -> None:
        """A checkpoint's model (and optimizer) state. Memory-mapped, not copied: each rank keeps
        only its shard (distributed.load_full_state)."""
        weights = ckpt.load_weights(path)
        load_full_state(
            self.model, self.optimizer, weights["model"], weights["optimizer"] if with_optimizer else None, self.dist
        )
        del weights

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
            ckpt.write_weights(stage, model_sd, optim_sd)  # only rank 0 holds them (cpu_offload)
            state = {
                "scheduler": self.scheduler.state_dict(),
                "precision": self.precision.state_dict(),
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
            if self.samples is not None:
                self.samples.sync()  # and so are the rollout samples
            ckpt.commit(
                self.run_dir,
                stage,
                self.version,
                state,
                ckpt.RetentionPolicy.from_config(self.cfg.checkpoint),
                self.last_values,
            )
        barrier(self.dist)
        self.last_ckpt_version = self.version

    # ----------------------------------------------------------------------------------------
    # generation
    # ----------------------------------------------------------------------------------------

    def _my_slice(self, items: list) -> list:
        """This rank's equal share of a step's prompts (whole groups); check_world_size made sure
        the world size divides them, so nothing is dropped."""
        per = len(items) // self.dist.world
        return items[self.dist.rank * per : (self.dist.rank + 1) * per]

    def _my_eval_share(self, items: list) -> list:
        """Every rank-th eval problem, starting at this rank: every problem is evaluated once,
        whatever the world size (AIME24's 30 problems on 8 ranks are 30, not 24)."""
        return items[self.dist.rank :: self.dist.world]

    def generate_batch(self) -> Batch:
        """One batch from the current weights (stale_k mode), with rewards and behaviour log-probs."""
        roll = self.cfg.rollout
        t0 = time.perf_counter()
        problems = self._my_slice(self.task.sample(self.prompt_rng, roll.prompts_per_step))
        if self.engine is not self.eval_engine and self.engine_version != self.version:
            t_sync = time.perf_counter()
            self.engine.load_weights(model_state_for_engine(self.model, self.dist))
            self.engine_version = self.version
            self.weight_sync_s = time.perf_counter() - t_sync  # gather + hand-over + in-place load
        prompts = [self.task.prompt_text(p) for p in problems]
        gen = self.engine.generate(prompts, roll.group_size, roll.max_new_tokens, roll.temperature, roll.top_p)
        if self.cfg.task.demonstrations:  # a warm-up's stand-in for pretraining (trainer/demonstrations.py)
            gen = demonstrations.inject(
                gen,
                [p.answer for p in problems],
                self.policy.tokenizer,
                self.policy.eos_token_ids[0],
                roll.group_size,
                self.cfg.task.demonstrations,
            )
        expanded = [p for p in problems for _ in range(roll.group_size)]
        rewards = self.task.train_rewards(expanded, gen.texts, gen.finished)
        self._check_rewards(rewards, f"generation step {self.gen_step}")
        rows = [(t, p.answer) for t, p in zip(prompts, problems) for _ in range(roll.group_size)]
        batch = make_batch(gen, rewards, self.version, roll.group_size, 0.0, problems=rows)
        if roll.behav_logp == "recompute":
            recompute_behaviour_logp(
                batch, self.model, roll.temperature, self.cfg.train.micro_batch_size, self.device, self.precision
            )
        batch.gen_seconds = time.perf_counter() - t0
        return batch

    def _check_rewards(self, rewards: RewardBatch, where: str) -> None:
        """Failed rewards are counted (metrics), warned about, and fatal when they are all of a step:
        a run must never train or report on rewards that silently became 0."""
        if not rewards.failed:
            return
        what = f"{where}: {rewards.errors} reward errors and {rewards.timeouts} timeouts out of {len(rewards.scores)}; first: {rewards.first_failure}"
        if rewards.all_failed:
            raise RewardFailure(f"every reward failed at {what}")
        log.warning("%s", what)

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
            "dual_clip_c": alg.dual_clip_c,
            "token_mask": alg.token_mask,
            "token_mask_ref": alg.token_mask_ref,
            "token_mask_low": alg.token_mask_low,
            "token_mask_high": alg.token_mask_high,
            "seq_mask": alg.seq_mask,
            "seq_mask_ref": alg.seq_mask_ref,
            "seq_mask_low": alg.seq_mask_low,
            "seq_mask_high": alg.seq_mask_high,
            "sq_log_ratio_coef": alg.sq_log_ratio_coef,
            "sapo_tau_pos": alg.sapo_tau_pos,
            "sapo_tau_neg": alg.sapo_tau_neg,
            "agg": alg.loss_agg,
            # Dr. GRPO's constant normaliser; without it a micro-batch's padded width is used.
            "max_response_len": self.cfg.rollout.max_new_tokens,
        }
        if alg.tis_cap is not None:
            params["tis_cap"] = alg.tis_cap
        engine_masks = (alg.token_mask and alg.token_mask_ref == "engine") or (
            alg.seq_mask and alg.seq_mask_ref == "engine"
        )
        if alg.tis_cap is not None or engine_masks:
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
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        stats = self.accumulate_gradients(mb, adv, prox)
        stats["actor/grad_norm"] = self.precision.clip_and_step(
            self.optimizer, self.model.parameters(), self.cfg.algorithm.grad_clip
        )
        self.scheduler.step()
        return stats

    def accumulate_gradients(self, mb: Batch, adv: torch.Tensor, prox: torch.Tensor | None) -> dict[str, float]:
        """Backward passes over the minibatch's micro-batches (gradients add up in .grad).

        The loss is normalised by the whole minibatch across ranks (its valid tokens, or its
        sequences), so neither micro_batch_size nor the number of ranks changes the gradient;
        FSDP averages gradients over ranks, hence the factor world."""
        alg = self.cfg.algorithm
        n = len(mb)
        micro = self.cfg.train.micro_batch_size or n
        token_weighted = self._token_weighted()
        local_total = float(mb.response_mask.sum()) if token_weighted else float(n)
        scale = self.dist.world / max(1.0, sum_across(local_total, self.dist))
        keep = self._minibatch_m2po_keep(mb, adv, micro)
        stats: dict[str, float] = defaultdict(float)
        lows, highs, entropy_sum = [], [], 0.0
        seen = []  # per micro-batch: what the loss saw, for the diagnostics and the counterfactual marks
        classes = TokenClassTally(self.decision_positions)
        for start in range(0, n, micro):
            rows = slice(start, min(n, start + micro))
            rmask = mb.response_mask[rows].to(self.device)
            with self.precision.autocast():
                logp, ent = token_logprobs(
                    self.model,
                    mb.input_ids[rows].to(self.device),
                    mb.attention_mask[rows].to(self.device),
                    mb.prompt_len,
                    self.cfg.rollout.temperature,
                    with_entropy=True,
                )
            adv_tok = broadcast_to_tokens(adv[rows].to(self.device), rmask)
            behav = mb.behav_logp[rows].to(self.device)
            params = self._loss_params(rows, mb, prox)
            if keep is not None:
                params["m2po_keep"] = keep[rows].to(self.device)
            loss, part, marks = policy_loss_marked(alg.objective, logp, behav, adv_tok, rmask, **params)
            if self.samples is not None and self.samples.armed:
                self.samples.take(rows, marks, ent.detach(), adv[rows])  # the samples show this very loss's marks
            rollout = mb.rollout_logp[rows].to(self.device) if self._recording and mb.rollout_logp is not None else None
            seen.append(
                _Seen(
                    rows,
                    logp.detach() if self._recording else None,
                    behav,
                    adv_tok,
                    rmask,
                    marks.log_ratio,
                    params,
                    rollout,
                )
            )
            share = float(rmask.sum()) if token_weighted else float(rmask.shape[0])
            self.precision.backward(loss * (share * scale))
            entropy_sum += (ent * rmask).sum().item()
            classes.add(rmask, ent, marks.no_gradient, marks.log_ratio, adv_tok)
            for k, v in part.items():
                stats[k] += v * share / max(local_total, 1.0)
            lows.append(part.get("actor/ratio_min", math.nan))
            highs.append(part.get("actor/ratio_max", math.nan))
        stats["actor/ratio_min"] = min(lows)
        stats["actor/ratio_max"] = max(highs)
        stats["actor/entropy"] = entropy_sum / max(1.0, float(mb.response_mask.sum()))
        stats.update(
            update_diagnostics(*(torch.cat([getattr(s, f) for s in seen]) for f in ("log_r", "adv_tok", "rmask")))
        )
        if self._recording:
            self._record_counterfactuals(seen, micro < n)
        stats.update(classes.stats())
        return stats

    def _record_counterfactuals(self, seen: list[_Seen], several_micro: bool) -> None:
        """The marks every other correction would have made in this very update (docs/SAMPLES.md):
        each variant's loss on the tensors the real loss saw, without gradient. m2po's mask takes the
        run's scope (the whole minibatch across ranks: collective, so every rank runs this); m2po_cap
        solves its tau per micro-batch as its loss does; the rest are row-local, so only the recorded
        rows are evaluated."""
        alg = self.cfg.algorithm
        wanted = self.samples.recorded_rows if self.samples is not None else 0
        has_engine = all(s.rollout is not None and bool(torch.isfinite(s.rollout).all()) for s in seen)
        if self.dist.enabled:  # every rank must choose the same variants: their m2po masks are collective
            has_engine = max_across(int(not has_engine), self.dist) == 0
        for variant in counterfactual_variants(alg, has_engine=has_engine):
            keep = None
            if variant.objective == "m2po" and alg.m2po_scope == "minibatch" and (several_micro or self.dist.enabled):
                cat = {f: torch.cat([getattr(s, f) for s in seen]) for f in ("log_r", "adv_tok", "rmask")}
                keep = minibatch_m2po_keep(cat["log_r"], cat["adv_tok"], cat["rmask"], alg.tau_m2, self.dist)
            if self.samples is None:
                continue
            whole = variant.objective == "m2po_cap" or (variant.objective == "m2po" and keep is None)
            for s in seen:
                k = min(s.rows.stop, wanted) - s.rows.start  # this micro-batch's recorded rows
                if k <= 0:
                    continue
                cut = slice(None) if whole else slice(0, k)
                params = {**s.params, **variant.overrides}
                params.pop("m2po_keep", None)
                if has_engine:
                    params["rollout_logp"] = s.rollout
                for name in ("rollout_logp", "prox_logp"):
                    if params.get(name) is not None:
                        params[name] = params[name][cut]
                if keep is not None:
                    params["m2po_keep"] = keep[s.rows][cut].to(self.device)
                with torch.no_grad():
                    _, _, marks = policy_loss_marked(
                        variant.objective, s.logp[cut], s.behav[cut], s.adv_tok[cut], s.rmask[cut], **params
                    )
                self.samples.take_counterfactual(s.rows, variant.name, marks)

    def _minibatch_m2po_keep(self, mb: Batch, adv: torch.Tensor, micro: int) -> torch.Tensor | None:
        """m2po_scope minibatch: Algorithm 1 over the whole minibatch on every rank, from log-ratios
        computed without gradient. None when the loss can do it alone: one micro-batch on one
        process is already the whole minibatch (no extra forward pass then)."""
        alg = self.cfg.algorithm
        if alg.objective != "m2po" or alg.m2po_scope != "minibatch":
            return None
        if micro >= len(mb) and not self.dist.enabled:
            return None
        logp = micro_batched_logprobs(self.model, mb, self.cfg.rollout.temperature, micro, self.device, self.precision)
        log_r = (logp - mb.behav_logp) * mb.response_mask
        adv_tok = broadcast_to_tokens(adv, mb.response_mask)
        return minibatch_m2po_keep(log_r, adv_tok, mb.response_mask, alg.tau_m2, self.dist)

    def train_on(self, batch: Batch, on_update=None) -> dict[str, float]:
        """U optimizer updates on one batch: minibatches of whole groups, `epochs` passes."""
        alg = self.cfg.algorithm
        G = batch.group_size
        adv = grpo_advantages(batch.rewards, G, alg.adv_std_normalize, alg.adv_eps)
        n_groups = len(batch) // G
        per_mb = n_groups // alg.updates_per_step
        prox = None
        if alg.objective == "decoupled_ppo":  # AReaL's proximal policy: the weights before this step
            prox = micro_batched_logprobs(
                self.model,
                batch,
                self.cfg.rollout.temperature,
                self.cfg.train.micro_batch_size,
                self.device,
                self.precision,
            )
        per_update: dict[str, list[float]] = defaultdict(list)
        staleness = []
        # every rank knows: a counterfactual m2po mask over the minibatch is collective under torchrun
        record = train_due(self.cfg.samples, self.version, self.U, self.train_step)
        t0 = time.perf_counter()
        for epoch in range(alg.epochs):
            order = list(range(n_groups))
            self.shuffle_rng.shuffle(order)
            for u in range(alg.updates_per_step):
                groups = order[u * per_mb : (u + 1) * per_mb]
                rows = torch.tensor([g * G + j for g in groups for j in range(G)])
                mb = batch.select(rows)
                staleness.append(self.version - mb.versions)
                self._recording = record and epoch == alg.epochs - 1 and u == alg.updates_per_step - 1
                if self._recording and self.samples is not None:
                    self.samples.arm(mb, self.version)  # the step's last update: its version is the metric step
                stats = self.update(mb, adv[rows], None if prox is None else prox[rows])
                self._recording = False
                for k, v in stats.items():
                    per_update[k].append(v)
                self.version += 1
                if self.samples is not None and self.samples.armed:
                    self.samples.write_train(self.version)
                if on_update is not None:
                    on_update(self.version)
        train_s = time.perf_counter() - t0
        metrics = {
            k: (min(v) if k.endswith("_min") else max(v) if k.endswith("_max") else float(np.mean(v)))
            for k, v in per_update.items()
        }
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
        metrics["reward/errors"] = float(batch.reward_errors)
        metrics["reward/timeouts"] = float(batch.reward_timeouts)
        if self.precision.scaler is not None:
            metrics["actor/skipped_updates"] = float(self.precision.skipped_updates)
        if batch.rollout_logp is not None:
            metrics["rollout/engine_kl"] = (
                (batch.rollout_logp - batch.behav_logp) * batch.response_mask
            ).sum().item() / max(1.0, batch.response_mask.sum().item())
            metrics.update(engine_diagnostics(batch.rollout_logp, batch.behav_logp, batch.response_mask))
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
            problems = self._my_eval_share(es.problems)
            right, failed, total = 0.0, 0.0, 0.0
            if problems:
                prompts = [es.prompt_text(p) for p in problems]
                gen = self.eval_engine.generate(
                    prompts,
                    ev.samples_per_problem,
                    ev.max_new_tokens or self.cfg.rollout.max_new_tokens,
                    ev.temperature,
                    ev.top_p,
                    record_logp=False,
                )
                expanded = [p for p in problems for _ in range(ev.samples_per_problem)]
                result = es.score(expanded, gen.texts, gen.finished)
                right, failed, total = float(sum(result.scores)), float(result.failed), float(len(result.scores))
                if self.samples is not None:
                    self.samples.write_eval(
                        self.version, es.name, problems, prompts, gen.texts, result, ev.samples_per_problem
                    )
                if result.failed:
                    log.warning(
                        "eval %s: %d of %d rewards failed; first: %s",
                        es.name,
                        result.failed,
                        len(result.scores),
                        result.first_failure,
                    )
            right, failed, total = (sum_across(v, self.dist) for v in (right, failed, total))
            if total and failed == total:
                raise RewardFailure(
                    f"every reward of eval set {es.name} failed ({int(failed)} items); see the log for the first error"
                )
            out[f"eval/{es.name}/acc"] = right / max(total, 1.0)
            out[f"eval/{es.name}/reward_failures"] = failed
        if out:
            out["eval/avg_acc"] = float(np.mean([v for k, v in out.items() if k.endswith("/acc")]))
        self.last_eval_version = self.version
        return out

    # ----------------------------------------------------------------------------------------
    # the loop
    # ----------------------------------------------------------------------------------------

    def log(self, values: dict[str, float]) -> None:
        unknown = [k for k in values if not is_known(k)]
        if unknown:
            raise KeyError(f"metric keys missing from trainer/metric_keys.py: {unknown}")
        self.last_values.update(values)
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
        metrics = mean_across(metrics, self.dist)  # every rank's keys must match here
        if self.pusher is not None:  # rank 0's counts, a point when one changes
            metrics.update(self.pusher.failure_counts())
        self.log(metrics)
        if self.dist.is_main:
            print(
                f"[trainer] update {self.version}/{self.sizes.total_updates} (training step {self.train_step}/{self.cfg.train.steps}) "
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
        why = f"signal {self.stop_signal}" if self.stop_signal is not None else "another rank was signalled"
        if getattr(self, "stop_cancelled", False) and getattr(self, "skip_checkpoint", False):
            print(
                f"[trainer] {why}: cancelled without a checkpoint (an alert asked) at update {self.version}", flush=True
            )
            return EX_CANCELLED
        if getattr(self, "stop_cancelled", False):
            print(f"[trainer] {why}: cancelled; checkpointing at update {self.version} and exiting", flush=True)
            self.save_checkpoint()
            return EX_CANCELLED
        print(f"[trainer] {why}: checkpointing at update {self.version} and stopping for requeue", flush=True)
        self.save_checkpoint()
        return EX_TEMPFAIL

    def _stop_agreed(self) -> bool:
        """Whether any rank has been asked to stop, decided by all ranks together.

        Signals reach ranks at different moments (or only one rank), so each rank all-reduces its
        flag (the max of none 0 / requeue 1 / cancel 2 / cancel without checkpoint 3) once per
        iteration: every rank then enters the collective checkpoint (or skips it) at the same
        iteration, and none is left generating alone.
        """
        mine = 0
        if self.stop_signal is not None:
            mine = (
                1
                if not getattr(self, "stop_cancelled", False)
                else (3 if getattr(self, "skip_checkpoint", False) else 2)
            )
        agreed = max_across(mine, self.dist)
        if agreed:
            self.stop_cancelled = agreed >= 2
            self.skip_checkpoint = agreed == 3
        return agreed > 0

    def _run_stale_k(self) -> int:
        k = self.cfg.staleness.k
        while self.train_step < self.cfg.train.steps:
            if self._stop_agreed():
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
                    **self._take_weight_sync(),
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
            self.cfg,
            self.alphabet,
            self.model,
            self.version,
            self.cfg.train.seed + 1000 * (1 + self.version),
            self.device,
            self.threads,
        )
        dropped = 0.0
        while self.train_step < self.cfg.train.steps:
            if self._stop_agreed():
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
                    **({"perf/weight_sync_s": gen.last_sync_s} if gen.last_sync_s is not None else {}),
                    "_tokens": batch.response_mask.sum().item(),
                    "_samples": float(len(batch)),
                }
            )
            dropped = 0.0
            self.finish_step(metrics, t0)
        return EX_OK

    def _take_weight_sync(self) -> dict[str, float]:
        """perf/weight_sync_s of the sync this step did, if it did one (the vllm engine only)."""
        sync_s, self.weight_sync_s = getattr(self, "weight_sync_s", None), None
        return {} if sync_s is None else {"perf/weight_sync_s": sync_s}

    def close(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None and engine is not getattr(self, "eval_engine", None) and hasattr(engine, "close"):
            engine.close()  # the vLLM engine's processes
        if self.async_gen is not None:
            self.async_gen.close()
            self.async_gen = None
        for v in self._verifiers:
            v.close()
        if getattr(self, "task", None) is not None:
            self.task.close()
        if self.system is not None:
            self.system.close()
            self.system = None
        if self.pusher is not None:
            self.pusher.close()
            self.pusher = None
        if self.spool is not None:
            self.spool.close()
            self.spool = None
        if self.samples is not None:
            self.samples.close()
        if getattr(self, "dist", None) is not None:
            shutdown(self.dist)
