"""Checkpoints: everything needed to resume a run exactly, written atomically.

A checkpoint is a folder DIR/ckpt/step-<updates, 8 digits>/ holding `weights.pt` (the full model
and optimizer state, gathered and written by rank 0 alone), `state.pt` (scheduler, counters, RNG
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

Every file is read with `torch.load(weights_only=True)`: tensors and plain types only, so a crafted
checkpoint under a readable path cannot run code in the job. Everything a resume needs is stored
that way (numpy's RNG state as a tensor and plain numbers). A state.pt written before that held
numpy arrays: `load_state` reads it once with numpy's array types allowed besides (still no
arbitrary globals), rewrites it in the current form, and reads it plainly from then on.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import pickle
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

CKPT_DIR = "ckpt"
WEIGHTS = "weights.pt"
META = "meta.json"
PINS = "pins.json"
_NAME = re.compile(r"^step-(\d{8})\Z")


log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read safely (not tensors and plain types); names the file."""


def _numpy_rng_state() -> dict:
    """numpy's global RNG state as a tensor and plain numbers (weights_only loads it)."""
    state = np.random.get_state(legacy=False)
    return {"bit_generator": state["bit_generator"], "key": torch.from_numpy(state["state"]["key"].astype(np.int64)),
            "pos": int(state["state"]["pos"]), "has_gauss": int(state["has_gauss"]), "gauss": float(state["gauss"])}


def _numpy_from_saved(saved) -> dict | tuple:
    if not isinstance(saved, dict):  # an old checkpoint's ('MT19937', keys, pos, has_gauss, gauss)
        return saved
    return {"bit_generator": saved["bit_generator"], "has_gauss": saved["has_gauss"], "gauss": saved["gauss"],
            "state": {"key": saved["key"].numpy().astype(np.uint32), "pos": saved["pos"]}}


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
        raise CheckpointError(f"{path}: not a checkpoint this trainer reads safely ({str(exc).splitlines()[-1][:300]})") from None


def _legacy_numpy_globals() -> list:
    """numpy's array types, as an old state.pt's RNG state pickled them (numpy 1 and 2 names)."""
    found = [np.ndarray, np.dtype, type(np.dtype(np.uint32))]
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            found.append(getattr(__import__(module, fromlist=["_reconstruct"]), "_reconstruct"))
        except (ImportError, AttributeError):
            pass
    return found


def _numpy_rng_to_plain(state: dict) -> dict:
    """An old state's RNG entries (numpy's tuple with an array) in the current form."""
    for rank_state in state.get("rng", []):
        saved = rank_state.get("numpy")
        if isinstance(saved, tuple):
            name, keys, pos, has_gauss, gauss = saved
            rank_state["numpy"] = {"bit_generator": str(name), "key": torch.from_numpy(np.asarray(keys).astype(np.int64)),
                                   "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)}
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
    return _load(path / WEIGHTS, mmap=True)


def write_rank_queue(stage: Path, rank: int, queue_state: list) -> None:
    _save(queue_state, stage / f"queue-rank{rank}.pt")


def commit(run_dir: Path, stage: Path, step: int, state: dict, keep: int | RetentionPolicy,
           metrics: dict[str, float] | None = None) -> Path:
    """Write state.pt (and meta.json) into the staged folder, rename it into place, then drop the
    checkpoints the retention policy no longer keeps (`keep` alone: the newest N)."""
    _save(state, stage / "state.pt")
    write_meta(stage, step, metrics or {})
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


@dataclass(frozen=True)
class RetentionPolicy:
    """The checkpoint section's clean-up fields (trainer/config.py CheckpointConfig)."""

    keep: int = 2
    best_metric: str | None = None
    best_count: int = 1
    best_mode: str = "max"  # "max" or "min"

    @classmethod
    def from_config(cls, section) -> "RetentionPolicy":
        """From a CheckpointConfig (or its dict); mode "auto" takes the metric's own direction."""
        d = section if isinstance(section, dict) else section.model_dump(mode="json")
        metric = d.get("keep_best_metric") or None
        mode = d.get("keep_best_mode") or "auto"
        if mode == "auto" and metric:
            from trainer.metric_keys import direction

            mode = direction(metric) or "max"
        return cls(keep=int(d.get("keep", 2)), best_metric=metric, best_count=int(d.get("keep_best", 1)),
                   best_mode=mode if mode in ("max", "min") else "max")


@dataclass
class Kept:
    """Why a checkpoint stays: "newest", "best <metric>", "pinned by <holder>" (empty: it goes)."""

    step: int
    reasons: list[str] = field(default_factory=list)


def retention(steps: list[int], policy: RetentionPolicy, metric_at: dict[int, float] | None = None,
              pins: dict[int, list[str]] | None = None) -> dict[int, list[str]]:
    """For each checkpoint step, the reasons it is kept (an empty list: it may be deleted).

    Newest `keep` by step; best `best_count` by the metric value at each step (steps with no finite
    value never count as best; ties go to the newer); every pinned step."""
    metric_at, pins = metric_at or {}, pins or {}
    ordered = sorted(steps)
    reasons: dict[int, list[str]] = {s: [] for s in ordered}
    for s in ordered[-policy.keep:] if policy.keep > 0 else []:
        reasons[s].append(f"newest {policy.keep}")
    if policy.best_metric and policy.best_count > 0:
        scored = [(metric_at[s], s) for s in ordered if s in metric_at and math.isfinite(metric_at[s])]
        sign = 1 if policy.best_mode == "max" else -1
        scored.sort(key=lambda vs: (sign * vs[0], vs[1]), reverse=True)
        for value, s in scored[: policy.best_count]:
            reasons[s].append(f"best {policy.best_metric} ({value:.4g}, {policy.best_mode})")
    for s in ordered:
        for holder in pins.get(s, []):
            reasons[s].append(f"pinned by {holder}")
    return reasons


def prune(run_dir: Path, policy: RetentionPolicy) -> list[int]:
    """Delete the checkpoints `retention` does not keep; returns their steps."""
    found = list_checkpoints(run_dir)
    steps = [checkpoint_step(c) for c in found]
    metric_at = {}
    if policy.best_metric:
        for c in found:
            value = read_meta(c).get("metrics", {}).get(policy.best_metric)
            if isinstance(value, (int, float)):
                metric_at[checkpoint_step(c)] = float(value)
    reasons = retention(steps, policy, metric_at, read_pins(run_dir))
    gone = []
    for c in found:
        if not reasons[checkpoint_step(c)]:
            shutil.rmtree(c, ignore_errors=True)
            gone.append(checkpoint_step(c))
    return gone


def write_meta(folder: Path, step: int, metrics: dict[str, float]) -> None:
    """meta.json: the step and the last value of each metric logged up to it (finite values only,
    so the file stays plain JSON)."""
    finite = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
    with open(Path(folder) / META, "w") as fh:
        json.dump({"step": step, "metrics": finite}, fh, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())


def read_meta(folder: Path) -> dict:
    try:
        return json.loads((Path(folder) / META).read_text())
    except (OSError, ValueError):
        return {}  # written before meta.json existed, or unreadable: no metrics known


def read_pins(run_dir: Path) -> dict[int, list[str]]:
    """{step: [holder, ...]} from DIR/pins.json; none when absent. An unreadable file pins
    nothing new but is never silently treated as empty by the writer (add_pin refuses)."""
    try:
        data = json.loads((Path(run_dir) / PINS).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        # Unreadable pins: keep everything rather than delete what a child may need.
        return {checkpoint_step(c): ["an unreadable pins.json"] for c in list_checkpoints(run_dir)}
    out: dict[int, list[str]] = {}
    for pin in data.get("pins", []):
        out.setdefault(int(pin["step"]), []).append(str(pin.get("holder", "?")))
    return out


def add_pin(run_dir: Path, step: int, holder: str) -> None:
    """Pin `step` of the run in `run_dir` for `holder` (e.g. "run 12")."""
    add_pins(run_dir, [(step, holder)])


def add_pins(run_dir: Path, pins: list[tuple[int, str]]) -> None:
    """Pin each (step, holder) in DIR/pins.json: idempotent, one write for them all, and safe
    against concurrent writers (an exclusive lock on DIR/.pins.lock, then write-and-rename).
    An unreadable pins.json raises rather than being replaced (its pins would be lost)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / ".pins.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = run_dir / PINS
        data = json.loads(path.read_text()) if path.exists() else {"pins": []}
        have = {(p["step"], p["holder"]) for p in data["pins"]}
        new = [{"step": int(step), "holder": holder} for step, holder in dict.fromkeys(pins) if (int(step), holder) not in have]
        if new:
            data["pins"].extend(new)
            tmp = run_dir / f".{PINS}.tmp{os.getpid()}"
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(tmp, path)


def remove_pins(run_dir: Path, pins: list[tuple[int, str]]) -> None:
    """Take back pins (a fork whose creation was refused after it pinned); under the same lock."""
    path = Path(run_dir) / PINS
    if not path.exists():
        return
    gone = {(int(step), holder) for step, holder in pins}
    with open(Path(run_dir) / ".pins.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(path.read_text())
        data["pins"] = [p for p in data["pins"] if (p["step"], p["holder"]) not in gone]
        tmp = Path(run_dir) / f".{PINS}.tmp{os.getpid()}"
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)


def folder_bytes(folder: Path) -> int:
    """Bytes of the files in a checkpoint folder."""
    return sum(f.stat().st_size for f in Path(folder).iterdir() if f.is_file())


def checkpoint_steps(total_updates: int, updates_per_step: int, every: int, first_update: int | None = None) -> list[int]:
    """The update counts a run that is not stopped early writes checkpoints at: the first step end
    past each multiple of `every` (the loop's `_due`), and the end of training."""
    first = first_update if first_update is not None else updates_per_step
    steps, last = [], -1
    for v in range(first, total_updates + 1, updates_per_step):
        if every > 0 and v // every > last // every:
            steps.append(v)
            last = v
    if total_updates not in steps:
        steps.append(total_updates)
    return steps


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
