"""Asynchronous generation: a separate process with its own engine, bounded staleness.

The generator process produces whole batches while the trainer trains, each through the same
`generate_batch` as stale_k (trainer/rollout/generation.py). Weights reach it through shared-memory
tensors, published by the trainer every `sync_every` updates with their version. A step whose every
reward failed ends the generator and reaches the trainer as the same `RewardFailure`.

Admission (AReaL-style, so it never produces rollouts that would only be thrown away): before
starting batch P (the P-th it produces) with weights of version v, the generator needs

    committed + (P - C) * U + (U - 1) - v <= max_staleness

where C is the number of batches the trainer has taken, `committed` the version the trainer will
have once it has finished the batch it is training on, and U the updates per batch. The P - C
batches ahead of batch P add at most U updates each, so the left side bounds the staleness any
sample of batch P can reach during its own U updates. When the bound fails the generator waits for
newer weights (`staleness.on_exceed: wait`, the default). The trainer checks each batch again on
arrival and drops one that would exceed the bound (under `wait` this only happens if the accounting
above were wrong; `rollout/dropped_frac` and `rollout/dropped_samples` show it). Under
`on_exceed: drop` the generator does not wait for weights: it runs at most `batches_ahead` batches
ahead of the trainer, and the trainer's check on arrival discards what is too stale.

Every hand-over has a deadline, `staleness.sync_timeout_s` (T): the trainer waits at most T for the
weights lock, at most T for the generator to load a published version (it loads between batches)
and at most T for a batch. Past it the run fails with `SyncTimeout`, naming the rank and the phase,
instead of hanging on a generator that stopped. The generator exits when its trainer is gone.
"""

from __future__ import annotations

import os
import queue as queue_mod
import random
import time
import traceback

import torch
import torch.multiprocessing as tmp

from trainer.rollout.rewards import RewardFailure, ignore_stop_signals
from trainer.telemetry.utilisation import GeneratorClock

POLL_S = 0.005
WEIGHT_SYNC_KEY = "weight_sync_s"  # travels beside a batch's state, not in it
REWARD_FAILURE_KEY = "reward_failure"  # every reward of a batch failed (trainer/rollout/rewards.py)


class SyncTimeout(RuntimeError):
    """A hand-over between the trainer and the generator missed its deadline."""


class Control:
    """Counters shared between the trainer and the generator (all guarded by `lock`)."""

    def __init__(self, ctx, start_version: int):
        self.lock = ctx.Lock()
        self.stop = ctx.Event()
        self.weights_version = ctx.Value("q", -1, lock=False)
        self.loaded_version = ctx.Value("q", -1, lock=False)  # the weights the generator holds
        self.consumed = ctx.Value("q", 0, lock=False)
        self.committed = ctx.Value("q", start_version, lock=False)
        self.clock = GeneratorClock(ctx)  # where the generator's time went (telemetry/utilisation.py)


def admissible(
    committed: int, produced: int, consumed: int, updates_per_batch: int, weights_version: int, max_staleness: int
) -> bool:
    worst = committed + (produced - consumed) * updates_per_batch + updates_per_batch - 1 - weights_version
    return worst <= max_staleness


def batches_ahead(updates_per_batch: int, max_staleness: int) -> int:
    """`on_exceed: drop`: how many batches the generator may run ahead of the trainer. Its weights
    are not checked; the trainer drops a batch that arrives too stale."""
    return max_staleness // updates_per_batch + 1


def may_start(on_exceed: str, committed, produced, consumed, updates_per_batch, weights_version, max_staleness) -> bool:
    """Whether the generator may start its next batch now."""
    if on_exceed == "drop":
        return produced - consumed < batches_ahead(updates_per_batch, max_staleness)
    return admissible(committed, produced, consumed, updates_per_batch, weights_version, max_staleness)


def generator_main(
    cfg_json: str, alphabet: str, shared: dict, ctrl: Control, out, seed: int, device: str, threads: int
) -> None:
    """Entry point of the generator process."""
    ignore_stop_signals()  # the trainer handles the cluster's stop signal, then stops us
    try:
        _generate_forever(cfg_json, alphabet, shared, ctrl, out, seed, device, threads)
    except RewardFailure as exc:  # the trainer stops the run as stale_k does, with the same message
        out.put({REWARD_FAILURE_KEY: str(exc)})
    except Exception:
        out.put({"error": traceback.format_exc()})


def _generate_forever(cfg_json, alphabet, shared, ctrl, out, seed, device, threads):
    from trainer.config import RunConfig, updates_per_step_total
    from trainer.data.tasks import build_task
    from trainer.policy.models import load_policy
    from trainer.policy.precision import Precision
    from trainer.rollout.generation import BatchParts, Swap, generate_batch, rollout_engine

    if threads:
        torch.set_num_threads(threads)
    cfg = RunConfig.model_validate_json(cfg_json)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    dev = torch.device(device)
    task = build_task(cfg.task)
    policy = load_policy(cfg.model, alphabet, cfg.train.seed, dev)
    precision = Precision(cfg.model.dtype, dev)
    engine = rollout_engine(cfg, policy, dev, precision)
    parts = BatchParts(cfg, task, policy, policy.model, dev, precision)
    U = updates_per_step_total(cfg)
    produced = 0
    trainer_pid = os.getppid()
    clock, bound, on_exceed = ctrl.clock, cfg.staleness.max_staleness, cfg.staleness.on_exceed
    weights = _Weights(cfg, ctrl, shared, policy, engine)
    swap = Swap(weights.newer, weights.load) if cfg.rollout.partial else None
    try:
        while not ctrl.stop.is_set() and os.getppid() == trainer_pid:  # an orphan stops
            if weights.newer():
                weights.load()
            version = weights.version
            with ctrl.lock:
                consumed, committed = ctrl.consumed.value, ctrl.committed.value
            state = (on_exceed, committed, produced, consumed, U)
            if version < 0 or not may_start(*state, version, bound):
                _idle(clock, version < 0 or may_start(*state, committed, bound))
                continue
            t_gen, loading_before = time.perf_counter(), clock.values["load_s"].value
            problems = task.sample(rng, cfg.rollout.prompts_per_step)  # the whole batch: the trainer slices it
            batch = generate_batch(parts, engine, problems, version, produced, swap)
            loading = clock.values["load_s"].value - loading_before  # a partial rollout's swaps
            clock.add("busy_s", time.perf_counter() - t_gen - loading)
            clock.add("tokens", float(batch.response_mask.sum()))
            out.put({**to_wire(batch.to_state()), WEIGHT_SYNC_KEY: weights.take_sync_s()})
            produced += 1
    finally:
        task.close()
        if hasattr(engine, "close"):
            # vLLM's engine process: a multiprocessing child exits without atexit handlers, and
            # would otherwise wait for it forever
            engine.close()


def _idle(clock, waiting_for_weights: bool) -> None:
    """One poll interval without work, counted; as a wait for weights when the trainer's newest
    weights would have let the generator start."""
    t_idle = time.perf_counter()
    time.sleep(POLL_S)
    idle = time.perf_counter() - t_idle
    clock.add("idle_s", idle)
    if waiting_for_weights:
        clock.add("wait_weights_s", idle)


class _Weights:
    """The generator's side of the weights: which version it holds, and loading the newest."""

    def __init__(self, cfg, ctrl: Control, shared: dict, policy, engine):
        self.cfg, self.ctrl, self.shared, self.policy, self.engine = cfg, ctrl, shared, policy, engine
        self.version = -1
        self.sync_s = None  # seconds of the vllm weight sync before the next batch, reported with it

    def newer(self) -> bool:
        return self.ctrl.weights_version.value > self.version

    def load(self) -> int:
        t_load = time.perf_counter()
        with self.ctrl.lock:
            self.version = self.ctrl.weights_version.value
            self.policy.model.load_state_dict(self.shared)
            if self.cfg.rollout.engine == "vllm":
                self.engine.load_weights(self.shared)
                self.sync_s = self.engine.last_sync_s
            self.ctrl.loaded_version.value = self.version
        self.ctrl.clock.add("load_s", time.perf_counter() - t_load)
        return self.version

    def take_sync_s(self) -> float | None:
        sync_s, self.sync_s = self.sync_s, None
        return sync_s


def to_wire(state: dict) -> dict:
    """Tensors as numpy arrays: pickled by value, so a batch outlives the process that made it
    (torch's shared-memory handles need the sender alive)."""
    return {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in state.items()}


def from_wire(state: dict) -> dict:
    import numpy as np

    return {k: (torch.from_numpy(v) if isinstance(v, np.ndarray) else v) for k, v in state.items()}


class AsyncGenerator:
    """The trainer's handle on the generator process (rank 0's, under torchrun)."""

    def __init__(
        self, cfg, alphabet: str, state: dict, start_version: int, seed: int, device: torch.device, threads: int
    ):
        """`state`: the full (unsharded) weights at `start_version`."""
        self.ctx = tmp.get_context("spawn")
        self.cfg = cfg
        self.U = cfg.algorithm.updates_per_step * cfg.algorithm.epochs
        self.timeout_s = cfg.staleness.sync_timeout_s
        self.ctrl = Control(self.ctx, start_version)
        self.shared = {k: v.detach().to("cpu", copy=True).share_memory_() for k, v in state.items()}
        self.out = self.ctx.Queue()
        self.version = start_version
        self.published_at = time.monotonic()
        self.last_sync_s: float | None = None  # the vllm sync before the batch last returned
        self.publish(state, start_version)
        self.proc = self.ctx.Process(
            target=generator_main,
            args=(cfg.model_dump_json(), alphabet, self.shared, self.ctrl, self.out, seed, str(device), threads),
            name="rollout-generator",
        )
        self.proc.start()

    def _fail(self, what: str, phase: str) -> SyncTimeout:
        return SyncTimeout(f"rank 0: the generator {what} within {self.timeout_s:g} s (phase: {phase})")

    def _lock(self, phase: str):
        """The shared lock, or a SyncTimeout naming who holds it: a generator stuck loading weights
        holds it (the trainer holds it only briefly)."""
        if self.ctrl.lock.acquire(timeout=self.timeout_s):
            return self.ctrl.lock
        if self.ctrl.loaded_version.value < self.ctrl.weights_version.value:
            raise self._fail(f"did not load weights version {self.ctrl.weights_version.value}", "weight load")
        raise self._fail("did not release the shared lock", phase)

    def publish(self, state: dict, version: int) -> None:
        """Copy full weights into shared memory and announce their version."""
        lock = self._lock("weight publish")
        try:
            with torch.no_grad():
                for k, v in state.items():
                    self.shared[k].copy_(v.detach().to("cpu"))
            self.ctrl.weights_version.value = version
        finally:
            lock.release()
        self.version, self.published_at = version, time.monotonic()

    def next_batch(self, should_stop) -> tuple[dict | None, float]:
        """Block until a batch arrives (or a stop is asked for); returns (state, seconds waited)."""
        t0 = time.perf_counter()
        while True:
            if should_stop():
                return None, time.perf_counter() - t0
            try:
                item = self.out.get(timeout=0.2)
            except queue_mod.Empty:
                if not self.proc.is_alive():
                    raise RuntimeError(f"the generator process died (exit code {self.proc.exitcode})") from None
                self._check_deadlines(time.perf_counter() - t0)
                continue
            if REWARD_FAILURE_KEY in item:
                raise RewardFailure(item[REWARD_FAILURE_KEY])
            if "error" in item:
                raise RuntimeError(f"the generator process failed:\n{item['error']}")
            self.last_sync_s = item.pop(WEIGHT_SYNC_KEY, None)
            return from_wire(item), time.perf_counter() - t0

    def _check_deadlines(self, waited_s: float) -> None:
        """While waiting for a batch: a published version must be loaded, and a batch must come,
        each within the timeout (the generator loads weights between batches)."""
        loaded = self.ctrl.loaded_version.value
        if loaded < self.version and time.monotonic() - self.published_at > self.timeout_s:
            if loaded < 0:
                raise self._fail(f"did not start and load weights version {self.version}", "start-up")
            raise self._fail(f"did not load weights version {self.version}", "weight load")
        if waited_s > self.timeout_s:
            raise self._fail(f"delivered no batch (it holds weights version {loaded})", "batch delivery")

    def take(self, trains: bool, version: int) -> None:
        """Record that the trainer took a batch; it will reach `version + U` if it trains on it."""
        lock = self._lock("batch accounting")
        try:
            self.ctrl.consumed.value += 1
            self.ctrl.committed.value = version + (self.U if trains else 0)
        finally:
            lock.release()

    def queued(self) -> int:
        try:
            return self.out.qsize()
        except NotImplementedError:
            return -1

    def close(self, grace_s: float = 10) -> None:
        """Stop the generator: asked, then killed after `grace_s` (0 after a failed hand-over)."""
        self.ctrl.stop.set()
        deadline = time.monotonic() + grace_s
        while self.proc.is_alive() and time.monotonic() < deadline:
            try:  # drain so the child's queue feeder thread can exit
                self.out.get(timeout=0.1)
            except queue_mod.Empty:
                pass
            except Exception:  # a half-received item of a dying process: nothing to keep
                pass
        if self.proc.is_alive():
            self.proc.kill()  # it ignores SIGTERM/SIGINT (those are the trainer's to act on)
        self.proc.join(timeout=5)
