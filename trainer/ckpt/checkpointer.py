"""Checkpoints of a running trainer: the run folder at start, save, resume and warm start.

`prepare_run_dir` decides fresh start or resume before the model loads. `Checkpointer` then saves
everything a resume needs (weights, optimizer, schedule, precision, counters, RNG states, the
stale queue) and restores it. The file formats and retention live in trainer/ckpt/checkpoint.py.

The weights go in `checkpoint.format`: sharded (each rank writes its own shards with DCP,
trainer/ckpt/sharded_checkpoint.py) or gathered (rank 0's weights.pt); both load, at any world size
(the per-rank queue and RNG states reshard in trainer/ckpt/reshard.py). A save stages a folder, and
`settle` renames it into place only once every rank's write has finished (a barrier, then rank 0):
with `checkpoint.background` the shards are written from a thread while the next step trains, and
the loop settles at that step's end. A kill at any moment leaves the committed set untouched; the
staging folder it leaves is removed at the next start (`drop_stages`).
"""

from __future__ import annotations

import json
import random
import shutil
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.ckpt import checkpoint as ckpt
from trainer.ckpt.reshard import ReshardError, derived_rng_state, reshard_queue
from trainer.ckpt.sharded_checkpoint import PendingSave, is_sharded, load_sharded, save_sharded
from trainer.config import ConfigError, RunConfig
from trainer.policy.distributed import DistInfo, barrier, full_state, load_full_state, max_across
from trainer.progress import Progress
from trainer.reporting import truncate_spool, write_offset
from trainer.rollout.batch import Batch
from trainer.run_markers import NO_CHECKPOINT_MARKER


def prepare_run_dir(cfg: RunConfig, run_dir: Path, sizes, resume_asked: bool, dist: DistInfo) -> Path | None:
    """The checkpoint to resume from, or None for a fresh start; rank 0 makes the folder match.

    A fresh start owns the folder: old checkpoints and metrics go. A resume from the checkpoint at
    update S cuts the spool after S."""
    latest = ckpt.latest_checkpoint(run_dir)
    attempt = cfg.reporting.attempt
    resume = (resume_asked or attempt > 1) and latest is not None
    if dist.is_main:
        for name in ckpt.drop_stages(run_dir):
            print(f"[trainer] removed {name}: a checkpoint an earlier attempt never committed", flush=True)
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


@dataclass
class PendingCheckpoint:
    """A checkpoint staged but not yet renamed into place: what `settle` commits."""

    version: int
    stage: Path
    state: dict | None  # state.pt's content as of `version` (rank 0's; None elsewhere)
    metrics: dict[str, float]  # meta.json's: the last value of each metric at `version`
    writing: PendingSave
    blocked_s: float  # how long `save` held training (queue, RNG states, and the write or its staging)


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
        self.pending: PendingCheckpoint | None = None  # written (or being written), not yet committed
        self.logged_through = -1  # the newest update whose checkpoint points are in the spool
        self._save_group = None  # the background writer's own process group, made at its first save

    def save(self, wait: bool = False) -> None:
        """A checkpoint at the current update; collective (every rank calls it). A background save
        is committed by the next `settle` (the loop's next step end); `wait`: committed now."""
        version = self.progress.version
        if self.pending is not None and self.pending.version == version:  # this update's is under way
            if wait:
                self.settle()
            return
        self.settle()
        stage = ckpt.staging_dir(self.run_dir, version)
        if self.dist.is_main:
            stage = ckpt.prepare_stage(self.run_dir, version)
        barrier(self.dist)
        started = time.perf_counter()
        ckpt.write_rank_queue(stage, self.dist.rank, [b.to_state() for b in self.queue])
        rng = self._gather_rng_states()
        state = self._resume_state(rng) if self.dist.is_main else None
        self.progress.last_ckpt_version = version
        writing = self._write(stage)
        blocked = time.perf_counter() - started
        self.pending = PendingCheckpoint(version, stage, state, dict(self.progress.last_values), writing, blocked)
        if wait or self.pending.writing.future is None:
            self.settle()

    def _write(self, stage: Path) -> PendingSave:
        """The weights and optimizer into the stage, in the configured format."""
        model, optimizer = self.updater.model, self.updater.optimizer
        if self.cfg.checkpoint.format == "sharded":
            background = self.cfg.checkpoint.background and self.dist.enabled
            if background and self._save_group is None:  # its own group: the writer thread's collectives
                self._save_group = torch.distributed.new_group(backend="gloo")
            return save_sharded(stage, model, optimizer, background=background, process_group=self._save_group)
        started = time.perf_counter()
        model_sd, optim_sd = full_state(model, optimizer, self.dist)
        if self.dist.is_main:
            ckpt.write_weights(stage, model_sd, optim_sd)  # only rank 0 holds them (cpu_offload)
        return PendingSave(None, time.perf_counter() - started, folder=stage, started=started).wait()

    def _resume_state(self, rng: list) -> dict:
        return {
            "scheduler": self.updater.scheduler.state_dict(),
            "precision": self.updater.precision.state_dict(),
            **self.progress.saved(),
            **{name: r.getstate() for name, r in self.rngs.items()},
            "rng": rng,
            "config": self.cfg.model_dump(mode="json"),
        }

    def settle(self) -> None:
        """Commit the checkpoint under way, if any: every rank waits until its shards are written,
        then rank 0 renames the folder into place. Collective; a no-op when nothing is pending."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        waited = time.perf_counter()
        writing = self._written(pending)
        if self.dist.is_main:
            if self.samples is not None:
                self.samples.sync()  # the rollout samples are durable before the checkpoint is
            ckpt.seal(pending.stage, pending.version, pending.state, pending.metrics)
            blocked = pending.blocked_s + time.perf_counter() - waited
            self._log_checkpoint(pending.version, ckpt.folder_bytes(pending.stage), blocked, writing.seconds_total)
            # The metrics, this checkpoint's point included, are durable before the checkpoint is: a
            # kill in between leaves a point that the resume from the checkpoint before cuts off.
            self.metric_log.sync()
            policy = ckpt.RetentionPolicy.from_config(self.cfg.checkpoint)
            ckpt.publish(self.run_dir, pending.stage, pending.version, policy)
        barrier(self.dist)

    def _written(self, pending: PendingCheckpoint) -> PendingSave:
        """Wait for this rank's write; every rank learns whether any rank's failed, so all of them
        fail together, naming the update (none is left waiting for a commit that never comes)."""
        error = None
        try:
            pending.writing.wait()  # raises what a background write raised, on this rank
        except Exception as exc:  # any failure of the write: reported on every rank below
            error = exc
        if max_across(int(error is not None), self.dist):
            where = f"{type(error).__name__}: {error}" if error is not None else "failed on another rank"
            raise RuntimeError(
                f"the checkpoint at update {pending.version} was not written ({where}); it is not committed: "
                "the newest committed checkpoint is the one before"
            ) from error
        return pending.writing

    def _log_checkpoint(self, version: int, size: int, blocked_s: float, write_s: float) -> None:
        """One point per checkpointed update, at that update (a background one commits a step later,
        but describes the state at `version`). An update already logged is not logged again: the same
        update checkpointed twice (a stop right after a periodic checkpoint, or right at a resume,
        whose attempt logged it and whose points the resume kept)."""
        if version <= self.logged_through:
            return
        values = {
            "checkpoint/bytes": float(size),
            "perf/checkpoint_blocked_s": blocked_s,
            "perf/checkpoint_write_s": write_s,
        }
        self.metric_log.log(version, values, advance=False)
        self.logged_through = version

    def _gather_rng_states(self) -> list:
        rng = [ckpt.rng_state()]
        if self.dist.enabled:
            gathered = [None] * self.dist.world
            torch.distributed.all_gather_object(gathered, rng[0])
            rng = gathered
        return rng

    def restore(self, path: Path) -> None:
        """Resume: weights, optimizer, schedule, counters, RNG states and this rank's queue, on
        this world size whatever the one the checkpoint was written with (trainer/ckpt/reshard.py)."""
        state = ckpt.load_state(path)
        if not ckpt.same_weights_shape(state["config"]["model"], self.cfg.model):
            raise RuntimeError(f"cannot resume from {path}: the model section changed since it was written")
        self.load_weights(path, with_optimizer=True)
        self.updater.scheduler.load_state_dict(state["scheduler"])
        self.updater.precision.load_state_dict(state.get("precision"))
        self.progress.restore(state)
        self.logged_through = self.progress.version
        self.progress.last_values = dict(ckpt.read_meta(path).get("metrics", {}))
        for name, r in self.rngs.items():
            r.setstate(state[name])
        saved_world = len(state["rng"])
        if saved_world == self.dist.world:
            ckpt.set_rng_state(state["rng"][self.dist.rank])
            self.queue.extend(Batch.from_state(b) for b in ckpt.load_rank_queue(path, self.dist.rank))
            return
        derived_rng_state(self.cfg.train.seed, self.dist.rank, self.progress.version)
        saved = [ckpt.load_rank_queue(path, r) for r in range(saved_world)]
        try:
            self.queue.extend(reshard_queue(saved, self.dist.rank, self.dist.world))
        except ReshardError as exc:
            why = f"cannot resume {path} (written by {saved_world} processes) on {self.dist.world}: {exc}"
            raise RuntimeError(why) from None
        if self.dist.is_main:
            print(f"[trainer] resharded from {saved_world} to {self.dist.world} processes", flush=True)

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
        """A checkpoint's model (and optimizer) state, in either format. Sharded: each rank reads
        only the slices it holds now. Gathered: memory-mapped, not copied, and each rank keeps only
        its shard (distributed.load_full_state)."""
        optimizer = self.updater.optimizer if with_optimizer else None
        if is_sharded(path):
            load_sharded(path, self.updater.model, optimizer)
            return
        weights = ckpt.load_weights(path)
        optimizer_state = weights["optimizer"] if with_optimizer else None
        load_full_state(self.updater.model, self.updater.optimizer, weights["model"], optimizer_state, self.dist)
        del weights
