"""Checkpoints: everything needed to resume a run exactly, written atomically.

A checkpoint is a folder DIR/ckpt/step-<updates, 8 digits>/ holding the model and optimizer state,
either sharded (`dcp/`: DCP's `.metadata` and one shard file per rank, each written by its rank;
trainer/ckpt/sharded_checkpoint.py) or gathered (`weights.pt`, written by rank 0 alone; the format of
older checkpoints, and `checkpoint.format: gathered`), `state.pt` (scheduler, counters, RNG
states, config: small, read by every rank) and one `queue-rank<r>.pt` per training process with its
stale queue, so a resumed stale-k run trains on the very batches it would have trained on. It is
written under a temporary name and renamed into place, so a kill at any moment leaves either the
old set of checkpoints or the new one, never a torn folder.

Clean-up (`retention`, applied at every commit): a checkpoint stays while it is one of the newest
`checkpoint.keep` (so a pending resume, which reads the newest, always finds it), one of the best
`checkpoint.keep_best` by `checkpoint.keep_best_metric`, or pinned. Each checkpoint's `meta.json`
holds the last value of every metric logged up to it (what "best" is judged on, readable without
torch). Pins live in DIR/pins.json, written by the dashboard when a run is forked from a step of
this one: the step may not exist yet, and a pin outlives the checkpoints it guards.
The torch-free half (folder names, meta.json, pins, retention, a fork's look-up) lives in
trainer/ckpt/checkpoint_files.py, which the dashboard imports; this module re-exports it.

Every file is read with `torch.load(weights_only=True)`: tensors and plain types only, so a crafted
checkpoint under a readable path cannot run code in the job. Everything a resume needs is stored
that way (numpy's RNG state as a tensor and plain numbers). A state.pt written before that held
numpy arrays: `load_state` reads it once with numpy's array types allowed besides (still no
arbitrary globals), rewrites it in the current form, and reads it plainly from then on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from trainer.ckpt.checkpoint_files import (  # noqa: F401 (the torch-free half, re-exported)
    _NAME,
    CKPT_DIR,
    META,
    PINS,
    SHARDED_DIR,
    WEIGHT_DEFINING_FIELDS,
    WEIGHTS,
    Kept,
    RetentionPolicy,
    add_pin,
    add_pins,
    checkpoint_step,
    checkpoint_steps,
    drop_stages,
    find_init_checkpoint,
    folder_bytes,
    latest_checkpoint,
    list_checkpoints,
    prepare_stage,
    prune,
    read_meta,
    read_pins,
    remove_pins,
    retention,
    same_weights_shape,
    staging_dir,
    write_meta,
)

log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read safely (not tensors and plain types); names the file."""


def _numpy_rng_state() -> dict:
    """numpy's global RNG state as a tensor and plain numbers (weights_only loads it)."""
    state = np.random.get_state(legacy=False)
    return {
        "bit_generator": state["bit_generator"],
        "key": torch.from_numpy(state["state"]["key"].astype(np.int64)),
        "pos": int(state["state"]["pos"]),
        "has_gauss": int(state["has_gauss"]),
        "gauss": float(state["gauss"]),
    }


def _numpy_from_saved(saved) -> dict | tuple:
    if not isinstance(saved, dict):  # an old checkpoint's ('MT19937', keys, pos, has_gauss, gauss)
        return saved
    return {
        "bit_generator": saved["bit_generator"],
        "has_gauss": saved["has_gauss"],
        "gauss": saved["gauss"],
        "state": {"key": saved["key"].numpy().astype(np.uint32), "pos": saved["pos"]},
    }


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": _numpy_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(_numpy_from_saved(state["numpy"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _load(path: Path, **kwargs):
    """torch.load of tensors and plain types only: a pickle that names any other global (os.system,
    a class whose __reduce__ runs code) is refused before anything of it runs."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, **kwargs)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{path}: not a checkpoint this trainer reads safely ({str(exc).splitlines()[-1][:300]})"
        ) from None


def _legacy_numpy_globals() -> list:
    """numpy's array types, as an old state.pt's RNG state pickled them (numpy 1 and 2 names)."""
    found = [np.ndarray, np.dtype, type(np.dtype(np.uint32))]
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            found.append(__import__(module, fromlist=["_reconstruct"])._reconstruct)
        except (ImportError, AttributeError):
            pass
    return found


def _numpy_rng_to_plain(state: dict) -> dict:
    """An old state's RNG entries (numpy's tuple with an array) in the current form."""
    for rank_state in state.get("rng", []):
        saved = rank_state.get("numpy")
        if isinstance(saved, tuple):
            name, keys, pos, has_gauss, gauss = saved
            rank_state["numpy"] = {
                "bit_generator": str(name),
                "key": torch.from_numpy(np.asarray(keys).astype(np.int64)),
                "pos": int(pos),
                "has_gauss": int(has_gauss),
                "gauss": float(gauss),
            }
    return state


def convert_legacy_state(path: Path) -> dict:
    """Read an old-format state.pt (numpy arrays in its RNG state) with only numpy's array types
    allowed besides tensors and plain types, and rewrite it in the current form (once: it then
    loads with weights_only alone). A folder this job cannot write keeps its file; the state is
    converted in memory."""
    file = Path(path) / "state.pt"
    with torch.serialization.safe_globals(_legacy_numpy_globals()):
        state = _load(file)
    state = _numpy_rng_to_plain(state)
    tmp = file.with_name(f".state.pt.tmp{os.getpid()}")
    try:
        _save(state, tmp)
        os.replace(tmp, file)
        log.info("converted %s to the current checkpoint format", file)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        log.warning("could not rewrite %s in the current checkpoint format (%s); converted in memory", file, exc)
    return state


def _save(obj, path: Path) -> None:
    with open(path, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def write_weights(stage: Path, model_sd: dict, optim_sd: dict) -> None:
    _save({"model": model_sd, "optimizer": optim_sd}, stage / WEIGHTS)


def load_weights(path: Path) -> dict:
    """{"model": ..., "optimizer": ...} as views of the memory-mapped file: under FSDP no rank copies
    the whole state into its memory, and the ranks of a node share the pages through the page cache.
    A sharded checkpoint is read whole into this process (its optimizer state keyed by parameter
    name): for one-process readers (export, tests); a running trainer loads shards with DCP."""
    path = Path(path)
    if (path / SHARDED_DIR / ".metadata").is_file():
        from trainer.ckpt.sharded_checkpoint import read_sharded

        return read_sharded(path)
    if not (path / WEIGHTS).is_file():  # written before weights had their own file
        state = load_state(path)
        return {"model": state["model"], "optimizer": state["optimizer"]}
    return _load(path / WEIGHTS, mmap=True)


def write_rank_queue(stage: Path, rank: int, queue_state: list) -> None:
    _save(queue_state, stage / f"queue-rank{rank}.pt")


def commit(
    run_dir: Path,
    stage: Path,
    step: int,
    state: dict,
    keep: int | RetentionPolicy,
    metrics: dict[str, float] | None = None,
) -> Path:
    """Write state.pt (and meta.json) into the staged folder, rename it into place, then drop the
    checkpoints the retention policy no longer keeps (`keep` alone: the newest N)."""
    seal(stage, step, state, metrics)
    return publish(run_dir, stage, step, keep)


def seal(stage: Path, step: int, state: dict, metrics: dict[str, float] | None = None) -> None:
    """The staged folder complete (state.pt, meta.json) but not yet visible: `publish` renames it."""
    _save(state, stage / "state.pt")
    write_meta(stage, step, metrics or {})


def publish(run_dir: Path, stage: Path, step: int, keep: int | RetentionPolicy) -> Path:
    """Rename a sealed stage into place (the commit), then apply the retention policy."""
    final = Path(run_dir) / CKPT_DIR / f"step-{step:08d}"
    if final.exists():  # the same step again (e.g. a stop right after a periodic checkpoint)
        shutil.rmtree(final)
    os.rename(stage, final)
    dir_fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    prune(run_dir, keep if isinstance(keep, RetentionPolicy) else RetentionPolicy(keep=keep))
    return final


# --------------------------------------------------------------------------------------------
# clean-up: what is kept, and why
# --------------------------------------------------------------------------------------------


def load_state(path: Path) -> dict:
    """state.pt of a checkpoint folder; an old-format one is converted (convert_legacy_state)."""
    try:
        return _load(Path(path) / "state.pt")
    except CheckpointError as refused:
        try:
            return convert_legacy_state(path)
        except CheckpointError:
            raise refused from None


def load_rank_queue(path: Path, rank: int) -> list:
    return _load(Path(path) / f"queue-rank{rank}.pt")
