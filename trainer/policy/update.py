"""The update: U optimizer updates on one batch (minibatches of whole groups, `epochs` passes),
each micro-batched, with the loss of the configured objective (trainer/algo/objectives.py).

The loss is normalised by the whole minibatch across ranks (its valid tokens, or its sequences),
so neither micro_batch_size nor the number of ranks changes the gradient; FSDP averages gradients
over ranks, hence the factor world.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
import torch

from trainer.algo.advantages import broadcast_to_tokens, grpo_advantages
from trainer.algo.counterfactual_marks import Seen, joined, record_counterfactuals
from trainer.algo.diagnostics import engine_diagnostics, engine_drift, policy_drift, update_diagnostics
from trainer.algo.m2po_scope import minibatch_m2po_keep
from trainer.algo.objectives import LossParams, check_loss_inputs, policy_loss_checked
from trainer.algo.token_classes import TokenClassTally
from trainer.policy.distributed import DistInfo, sum_across
from trainer.progress import Progress
from trainer.rollout.batch import Batch, micro_batched_logprobs, token_logprobs
from trainer.telemetry.samples import train_due
from trainer.telemetry.staleness import ObservedStaleness


def lr_factor(alg, total_updates: int, update: int) -> float:
    """The learning-rate multiplier at `update`: linear warm-up, then the schedule."""
    if alg.warmup_updates and update < alg.warmup_updates:
        return (update + 1) / alg.warmup_updates
    total = max(1, total_updates - alg.warmup_updates)
    progress = min(1.0, (update - alg.warmup_updates) / total)
    if alg.lr_schedule == "linear":
        return 1.0 - progress
    if alg.lr_schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0


@dataclass
class _Tally:
    """What the micro-batches of one update add up to."""

    classes: TokenClassTally
    stats: dict = field(default_factory=lambda: defaultdict(float))
    lows: list = field(default_factory=list)
    highs: list = field(default_factory=list)
    entropy_sum: float = 0.0
    seen: list = field(default_factory=list)  # per micro-batch: what the loss saw (Seen)


class Updater:
    def __init__(self, cfg, model, dist: DistInfo, precision, sizes, progress: Progress, shuffle_rng, samples):
        self.cfg, self.model, self.dist, self.precision = cfg, model, dist, precision
        self.device = dist.device
        self.progress = progress  # its version moves on with each update
        self.shuffle_rng = shuffle_rng
        self.samples = samples  # rank 0's SampleRecorder, else None
        self.decision_positions = None  # the tiny model's task sets them (algo/token_classes.py)
        alg = cfg.algorithm
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=alg.lr, weight_decay=alg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda update: lr_factor(cfg.algorithm, sizes.total_updates, update)
        )
        self.recording = False  # every rank: the update being run is the one rank 0 records

    # ---- one batch: U updates -----------------------------------------------------------------

    def train_on(self, batch: Batch, on_update=None) -> dict[str, float]:
        """U optimizer updates on one batch; the step's metrics. `on_update(version)` after each."""
        alg = self.cfg.algorithm
        adv = grpo_advantages(batch.rewards, batch.group_size, alg.adv_std_normalize, alg.adv_eps)
        prox = self._proximal_logp(batch)
        start = self.progress.version  # the staleness of the batch counts to here (docs: one definition)
        # every rank knows: a counterfactual m2po mask over the minibatch is collective under torchrun
        record = train_due(self.cfg.samples, start, alg.updates_per_step * alg.epochs, self.progress.train_step)
        per_update: dict[str, list[float]] = defaultdict(list)
        observed = ObservedStaleness()
        t0 = time.perf_counter()
        for last, rows in self._minibatches(batch):
            mb = batch.select(rows)
            observed.add(mb, self.progress.version)
            self.recording = record and last
            if self.recording and self.samples is not None:
                self.samples.arm(mb, start)  # the step's last update: its version is the metric step
            stats = self.update(mb, adv[rows], None if prox is None else prox[rows])
            self.recording = False
            for k, v in stats.items():
                per_update[k].append(v)
            self.progress.version += 1
            if self.samples is not None and self.samples.armed:
                self.samples.write_train(self.progress.version)
            if on_update is not None:
                on_update(self.progress.version)
        metrics = {
            k: (min(v) if k.endswith("_min") else max(v) if k.endswith("_max") else float(np.mean(v)))
            for k, v in per_update.items()
        }
        metrics.update(self._batch_metrics(batch, adv, start, time.perf_counter() - t0))
        metrics.update(observed.metrics())
        return metrics

    def _minibatches(self, batch: Batch):
        """(whether it is the step's last update, its rows) per update: whole groups, shuffled
        afresh (seeded) at the start of each epoch."""
        alg, G = self.cfg.algorithm, batch.group_size
        n_groups = len(batch) // G
        per_mb = n_groups // alg.updates_per_step
        for epoch in range(alg.epochs):
            order = list(range(n_groups))
            self.shuffle_rng.shuffle(order)
            for u in range(alg.updates_per_step):
                groups = order[u * per_mb : (u + 1) * per_mb]
                last = epoch == alg.epochs - 1 and u == alg.updates_per_step - 1
                yield last, torch.tensor([g * G + j for g in groups for j in range(G)])

    def _proximal_logp(self, batch: Batch) -> torch.Tensor | None:
        """decoupled_ppo's proximal policy (AReaL): the weights before this step."""
        if self.cfg.algorithm.objective != "decoupled_ppo":
            return None
        temperature, micro = self.cfg.rollout.temperature, self.cfg.train.micro_batch_size
        return micro_batched_logprobs(self.model, batch, temperature, micro, self.device, self.precision)

    def _batch_metrics(self, batch: Batch, adv: torch.Tensor, start: int, train_s: float) -> dict[str, float]:
        stale = (start - batch.versions).float()  # (B,) updates since each rollout's weights
        lengths = batch.response_mask.sum(-1)
        metrics = {
            "actor/lr": self.scheduler.get_last_lr()[0],
            "rollout/staleness_mean": stale.mean().item(),
            "rollout/staleness_min": stale.min().item(),
            "rollout/staleness_max": stale.max().item(),
            "train/reward_mean": batch.rewards.mean().item(),
            "train/reward_std": batch.rewards.std().item() if len(batch) > 1 else 0.0,
            "train/solved_frac": (batch.rewards >= 1.0).float().mean().item(),
            "train/response_len_mean": lengths.mean().item(),
            "train/adv_abs_mean": adv.abs().mean().item(),
            "perf/train_s": train_s,
            # the whole trained batch's, every rank's slice summed (the same on every rank, so the
            # ranks' mean keeps it)
            "reward/errors": sum_across(float(batch.reward_errors), self.dist),
            "reward/timeouts": sum_across(float(batch.reward_timeouts), self.dist),
        }
        if self.precision.scaler is not None:
            metrics["actor/skipped_updates"] = float(self.precision.skipped_updates)
        if batch.rollout_logp is not None:
            mask = batch.response_mask
            kl = ((batch.rollout_logp - batch.behav_logp) * mask).sum().item() / max(1.0, mask.sum().item())
            metrics["rollout/engine_kl"] = kl
            metrics.update(engine_diagnostics(batch.rollout_logp, batch.behav_logp, mask))
            metrics.update(engine_drift(batch.rollout_logp, batch.behav_logp, mask))
        self.progress.samples_seen += sum_across(float(len(batch)), self.dist)
        self.progress.tokens_seen += sum_across(lengths.sum().item(), self.dist)
        return metrics

    # ---- one update -----------------------------------------------------------------------------

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
        """Backward passes over the minibatch's micro-batches (gradients add up in .grad)."""
        n = len(mb)
        micro = self.cfg.train.micro_batch_size or n
        local_total = float(mb.response_mask.sum()) if self._token_weighted() else float(n)
        scale = self.dist.world / max(1.0, sum_across(local_total, self.dist))
        keep = self.minibatch_m2po_keep(mb, adv, micro)
        params = self._loss_params(mb, prox)
        if keep is not None:
            params["m2po_keep"] = keep.to(self.device)
        checked = self._check_loss_inputs(mb, adv, params)
        tally = _Tally(TokenClassTally(self.decision_positions))
        for start in range(0, n, micro):
            rows = slice(start, min(n, start + micro))
            self._micro_batch(mb, adv, params, checked, rows, scale, local_total, tally)
        stats = tally.stats
        stats["actor/ratio_min"] = min(tally.lows)
        stats["actor/ratio_max"] = max(tally.highs)
        stats["actor/entropy"] = tally.entropy_sum / max(1.0, float(mb.response_mask.sum()))
        log_r, adv_tok, rmask = joined(tally.seen)
        stats.update(update_diagnostics(log_r, adv_tok, rmask))
        if self.cfg.rollout.behav_logp == "recompute":  # behav_logp is then pi_trainer at the behaviour version
            stats.update(policy_drift(log_r, rmask))
        if self.recording:
            alg = self.cfg.algorithm
            record_counterfactuals(tally.seen, alg, self.samples, self.dist, self.device, micro < n)
        stats.update(tally.classes.stats())
        return stats

    def _check_loss_inputs(self, mb: Batch, adv: torch.Tensor, params: dict) -> LossParams:
        """The loss's checks of the minibatch, once: each reads the tensors back from the device."""
        rmask = mb.response_mask.to(self.device)
        adv_tok = broadcast_to_tokens(adv.to(self.device), rmask)
        behav = mb.behav_logp.to(self.device)
        return check_loss_inputs(self.cfg.algorithm.objective, behav, adv_tok, rmask, **params)

    def _micro_batch(self, mb, adv, params: dict, checked: LossParams, rows: slice, scale, local_total, tally: _Tally):
        """Forward, loss and backward of one micro-batch; its numbers added to `tally`."""
        rmask = mb.response_mask[rows].to(self.device)
        with self.precision.autocast():
            ids, attention = mb.input_ids[rows].to(self.device), mb.attention_mask[rows].to(self.device)
            temperature = self.cfg.rollout.temperature
            logp, ent = token_logprobs(self.model, ids, attention, mb.prompt_len, temperature, with_entropy=True)
        adv_tok = broadcast_to_tokens(adv[rows].to(self.device), rmask)
        behav = mb.behav_logp[rows].to(self.device)
        params = {name: value[rows] if isinstance(value, torch.Tensor) else value for name, value in params.items()}
        objective = self.cfg.algorithm.objective
        loss, part, marks = policy_loss_checked(objective, checked.rows(rows), logp, behav, adv_tok, rmask)
        if self.samples is not None and self.samples.armed:
            self.samples.take(rows, marks, ent.detach(), adv[rows])  # the samples show this very loss's marks
        rollout = mb.rollout_logp[rows].to(self.device) if self.recording and mb.rollout_logp is not None else None
        logp_seen = logp.detach() if self.recording else None
        tally.seen.append(Seen(rows, logp_seen, behav, adv_tok, rmask, marks.log_ratio, params, rollout))
        share = float(rmask.sum()) if self._token_weighted() else float(rmask.shape[0])
        self.precision.backward(loss * (share * scale))
        tally.entropy_sum += (ent * rmask).sum().item()
        tally.classes.add(rmask, ent, marks.no_gradient, marks.log_ratio, adv_tok)
        for k, v in part.items():
            tally.stats[k] += v * share / max(local_total, 1.0)
        tally.lows.append(part.get("actor/ratio_min", math.nan))
        tally.highs.append(part.get("actor/ratio_max", math.nan))

    def _token_weighted(self) -> bool:
        agg = self.cfg.algorithm.loss_agg
        if agg is None:
            agg = "seq-mean-token-mean" if self.cfg.algorithm.objective == "gspo" else "token-mean"
        return agg == "token-mean"

    def _loss_params(self, mb: Batch, prox: torch.Tensor | None) -> dict:
        """The loss's parameters for the whole minibatch (its tensors on the device)."""
        alg = self.cfg.algorithm
        names = ("tau_m2", "eps_low", "eps_high", "dual_clip_c", "sq_log_ratio_coef", "sapo_tau_pos", "sapo_tau_neg")
        names += tuple(f"{m}_mask{s}" for m in ("token", "seq") for s in ("", "_ref", "_low", "_high"))
        params = {name: getattr(alg, name) for name in names}
        params["budget"] = alg.tau_m2
        params["agg"] = alg.loss_agg
        # Dr. GRPO's constant normaliser; without it a micro-batch's padded width is used.
        params["max_response_len"] = self.cfg.rollout.max_new_tokens
        if alg.tis_cap is not None:
            params["tis_cap"] = alg.tis_cap
        engine_masks = (alg.token_mask and alg.token_mask_ref == "engine") or (
            alg.seq_mask and alg.seq_mask_ref == "engine"
        )
        if alg.tis_cap is not None or engine_masks:
            params["rollout_logp"] = mb.rollout_logp.to(self.device)
        if prox is not None:
            params["prox_logp"] = prox.to(self.device)
        return params

    def minibatch_m2po_keep(self, mb: Batch, adv: torch.Tensor, micro: int) -> torch.Tensor | None:
        """m2po_scope minibatch: Algorithm 1 over the whole minibatch on every rank, from log-ratios
        computed without gradient. None when the loss can do it alone: one micro-batch on one
        process is already the whole minibatch (no extra forward pass then)."""
        alg = self.cfg.algorithm
        if alg.objective != "m2po" or alg.m2po_scope != "minibatch":
            return None
        if micro >= len(mb) and not self.dist.enabled:
            return None
        temperature = self.cfg.rollout.temperature
        logp = micro_batched_logprobs(self.model, mb, temperature, micro, self.device, self.precision)
        log_r = (logp - mb.behav_logp) * mb.response_mask
        adv_tok = broadcast_to_tokens(adv, mb.response_mask)
        return minibatch_m2po_keep(log_r, adv_tok, mb.response_mask, alg.tau_m2, self.dist)
