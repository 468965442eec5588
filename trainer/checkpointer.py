"""Checkpoints of a running trainer: the run folder at start, save, resume and warm start.

`prepare_run_dir` decides fresh start or resume before the model loads. `Checkpointer` then saves
everything a resume needs (weights, optimizer, schedule, precision, counters, RNG states, the
stale queue) and restores it. The file formats and retention live in trainer/checkpoint.py.
"""

from __future__ import annotations

import json
import random
import shutil
from collections import deque
from pathlib import Path

import torch

from trainer import checkpoint as ckpt
from trainer.config import ConfigError, RunConfig
from trainer.distributed import DistInfo, barrier, full_state, load_full_state
from trainer.progress import Progress
from trainer.reporting import truncate_spool, write_offset
from trainer.rollout import Batch
from trainer.run_markers import NO_CHECKPOINT_MARKER


def prepare_run_dir(cfg: RunConfig, run_dir: Path, sizes, resume_asked: bool, dist: DistInfo) -> Path | None:
    """The checkpoint to resume from, or None for a fresh start; rank 0 makes the folder match.

    A fresh start owns the folder: old checkpoints and metrics go. A resume from the checkpoint at
    update S cuts the spool after S."""
    latest = ckpt.latest_checkpoint(run_dir)
    attempt = cfg.reporting.attempt
    resume = (resume_asked or attempt > 1) and latest is not None
    if dist.is_main:
        if resume:
            truncate_spool(run_dir, ckpt.checkpoint_step(latest), attempt)
        elif run_dir.exists():
            shutil.rmtree(run_dir / ckpt.CKPT_DIR, ignore_errors=True)
            truncate_spool(run_dir, -1, attempt)
            write_offset(run_dir, 0, attempt)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / NO_CHECKPOINT_MARKER).unlink(missing_ok=True)  # an earlier attempt's cancel
        (run_dir / "config.resolved.yaml").write_text(cfg.to_yaml())  # never the input file
        (run_dir / "derived.json").write_text(json.dumps(sizes.__dict__, indent=1))
    return latest if resume else None


class Checkpointer:
    def __init__(
        self,
        cfg: RunConfig,
        run_dir: Path,
        dist: DistInfo,
        updater,
        progress: Progress,
        rngs: dict[str, random.Random],
        queue: deque,
        metric_log,
        samples,
    ):
        self.cfg, self.run_dir, self.dist = cfg, run_dir, dist
        self.updater = updater  # model, optimizer, scheduler, precision
        self.progress = progress
        self.rngs = rngs  # "prompt_rng" and "shuffle_rng": the data order, saved and restored
        self.queue = queue  # the stale_k queue of batches, each rank its own
        self.metric_log = metric_log
        self.samples = samples  # rank 0's SampleRecorder, else None

    def save(self) -> None:
        """A checkpoint at the current update; collective (every rank calls it)."""
        version = self.progress.version
        stage = ckpt.staging_dir(self.run_dir, version)
        if self.dist.is_main:
            stage = ckpt.prepare_stage(self.run_dir, version)
        barrier(self.dist)
        ckpt.write_rank_queue(stage, self.dist.rank, [b.to_state() for b in self.queue])
        rng = self._gather_rng_states()
        model_sd, optim_sd = full_state(self.updater.model, self.updater.optimizer, self.dist)
        barrier(self.dist)
        if self.dist.is_main:
            ckpt.write_weights(stage, model_sd, optim_sd)  # only rank 0 holds them (cpu_offload)
            state = {
                "scheduler": self.updater.scheduler.state_dict(),
                "precision": self.updater.precision.state_dict(),
                **self.progress.saved(),
                **{name: r.getstate() for name, r in self.rngs.items()},
                "rng": rng,
                "config": self.cfg.model_dump(mode="json"),
            }
            self.metric_log.sync()  # metrics up to this step are durable before the checkpoint is
            if self.samples is not None:
                self.samples.sync()  # and so are the rollout samples
            policy = ckpt.RetentionPolicy.from_config(self.cfg.checkpoint)
            ckpt.commit(self.run_dir, stage, version, state, policy, self.progress.last_values)
        barrier(self.dist)
        self.progress.last_ckpt_version = version

    def _gather_rng_states(self) -> list:
        rng = [ckpt.rng_state()]
        if self.dist.enabled:
            gathered = [None] * self.dist.world
            torch.distributed.all_gather_object(gathered, rng[0])
            rng = gathered
        return rng

    def restore(self, path: Path) -> None:
        """Resume: weights, optimizer, schedule, counters, RNG states and this rank's queue."""
        state = ckpt.load_state(path)
        if not ckpt.same_weights_shape(state["config"]["model"], self.cfg.model):
            raise RuntimeError(f"cannot resume from {path}: the model section changed since it was written")
        self.load_weights(path, with_optimizer=True)
        self.updater.scheduler.load_state_dict(state["scheduler"])
        self.updater.precision.load_state_dict(state.get("precision"))
        self.progress.restore(state)
        self.progress.last_values = dict(ckpt.read_meta(path).get("metrics", {}))
        for name, r in self.rngs.items():
            r.setstate(state[name])
        ckpt.set_rng_state(state["rng"][self.dist.rank])
        self.queue.extend(Batch.from_state(b) for b in ckpt.load_rank_queue(path, self.dist.rank))

    def warm_start(self) -> None:
        """Start from another run's checkpoint: its weights, and its optimizer state if asked.
        Counters, schedule and data order start afresh: this is a new run."""
        init = self.cfg.init
        if init.from_path is None:
            reason = (
                "the dashboard resolves a run to its checkpoint folder; running the trainer by hand, set init.from_path"
            )
            raise ConfigError([("init.from_run", reason)])
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
            other = state["config"]["model"].get("name")
            raise ConfigError([("init.from_path", f"{path} holds weights of another model ({other})")])
        self.load_weights(path, with_optimizer=init.optimizer)
        if self.dist.is_main:
            what = "weights and optimizer" if init.optimizer else "weights, fresh optimizer"
            print(f"[trainer] warm start from {path} (update {ckpt.checkpoint_step(path)}; {what})", flush=True)

    def load_weights(self, path: Path, with_optimizer: bool) -> None:
        """A checkpoint's model (and optimizer) state. Memory-mapped, not copied: each rank keeps
        only its shard (distributed.load_full_state)."""
        weights = ckpt.load_weights(path)
        optimizer_state = weights["optimizer"] if with_optimizer else None
        load_full_state(self.updater.model, self.updater.optimizer, weights["model"], optimizer_state, self.dist)
        del weights
