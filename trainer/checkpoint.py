"""Checkpoints: everything needed to resume a run exactly, written atomically.

A checkpoint is a folder DIR/ckpt/step-<updates, 8 digits>/ holding `weights.pt` (the full model
and optimizer state, gathered and written by rank 0 alone), `state.pt` (scheduler, counters, RNG
states, config: small, read by every rank) and one `queue-rank<r>.pt` per training process with its
stale queue, so a resumed stale-k run trains on the very batches it would have trained on. It is
written under a temporary name and renamed into place, so a kill at any moment leaves either the
old set of checkpoints or the new one, never a torn folder. Only the newest `keep` are kept.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

CKPT_DIR = "ckpt"
WEIGHTS = "weights.pt"
_NAME = re.compile(r"^step-(\d{8})$")


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def list_checkpoints(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / CKPT_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _NAME.match(p.name) and (p / "state.pt").is_file()]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))


def checkpoint_step(path: Path) -> int:
    """The update count a checkpoint folder was written at."""
    return int(_NAME.match(Path(path).name).group(1))


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def staging_dir(run_dir: Path, step: int) -> Path:
    root = Path(run_dir) / CKPT_DIR
    root.mkdir(parents=True, exist_ok=True)
    return root / f".tmp-step-{step:08d}"


def _save(obj, path: Path) -> None:
    with open(path, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def write_weights(stage: Path, model_sd: dict, optim_sd: dict) -> None:
    _save({"model": model_sd, "optimizer": optim_sd}, stage / WEIGHTS)


def load_weights(path: Path) -> dict:
    """{"model": ..., "optimizer": ...} as views of the memory-mapped file: under FSDP no rank copies
    the whole state into its memory, and the ranks of a node share the pages through the page cache."""
    path = Path(path)
    if not (path / WEIGHTS).is_file():  # written before weights had their own file
        state = load_state(path)
        return {"model": state["model"], "optimizer": state["optimizer"]}
    return torch.load(path / WEIGHTS, map_location="cpu", weights_only=False, mmap=True)


def write_rank_queue(stage: Path, rank: int, queue_state: list) -> None:
    _save(queue_state, stage / f"queue-rank{rank}.pt")


def commit(run_dir: Path, stage: Path, step: int, state: dict, keep: int) -> Path:
    """Write state.pt into the staged folder, rename it into place, drop old checkpoints."""
    _save(state, stage / "state.pt")
    final = Path(run_dir) / CKPT_DIR / f"step-{step:08d}"
    if final.exists():  # the same step again (e.g. a stop right after a periodic checkpoint)
        shutil.rmtree(final)
    os.rename(stage, final)
    dir_fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def prepare_stage(run_dir: Path, step: int) -> Path:
    stage = staging_dir(run_dir, step)
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    return stage


WEIGHT_DEFINING_FIELDS = ("name", "tiny_hidden_size", "tiny_layers")


def same_weights_shape(saved_model_cfg: dict, model_cfg) -> bool:
    """Whether a checkpoint's model section describes the same weights (dtype, gradient
    checkpointing and prompt settings may differ: weights are always stored in float32)."""
    mine = model_cfg.model_dump(mode="json")
    return all(saved_model_cfg.get(k) == mine.get(k) for k in WEIGHT_DEFINING_FIELDS)


def find_init_checkpoint(path: str | Path, step: int | None) -> Path:
    """The checkpoint a warm start reads: `path` itself if it is a checkpoint folder, else the run
    folder's checkpoint at `step` (its newest when step is None). Names the path when it cannot."""
    p = Path(path)
    if (p / "state.pt").is_file():
        return p
    if not p.is_dir():
        raise FileNotFoundError(f"init.from_path: {p} does not exist (or is not reachable from this job)")
    found = list_checkpoints(p)
    if not found:
        raise FileNotFoundError(f"init.from_path: {p} holds no checkpoint ({p / CKPT_DIR} is empty or missing)")
    if step is None:
        return found[-1]
    for c in found:
        if checkpoint_step(c) == step:
            return c
    have = ", ".join(str(checkpoint_step(c)) for c in found)
    raise FileNotFoundError(f"init.from_step: {p} has no checkpoint at update {step} (it has {have})")


def load_state(path: Path) -> dict:
    return torch.load(Path(path) / "state.pt", map_location="cpu", weights_only=False)


def load_rank_queue(path: Path, rank: int) -> list:
    return torch.load(Path(path) / f"queue-rank{rank}.pt", map_location="cpu", weights_only=False)
