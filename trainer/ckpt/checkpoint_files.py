"""Checkpoint folders without torch: names and steps, meta.json, pins, retention and the look-up of a
fork's checkpoint. The dashboard reads and writes these (pins, the checkpoints card, clean-up) and must
start without torch; trainer/ckpt/checkpoint.py writes and reads the tensors and re-exports all of this.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

CKPT_DIR = "ckpt"
WEIGHTS = "weights.pt"  # the gathered format: rank 0's one file of model and optimizer
SHARDED_DIR = "dcp"  # the sharded format: DCP's .metadata and one shard file per rank
META = "meta.json"
PINS = "pins.json"
_NAME = re.compile(r"^step-(\d{8})\Z")


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


@dataclass(frozen=True)
class RetentionPolicy:
    """The checkpoint section's clean-up fields (trainer/config.py CheckpointConfig)."""

    keep: int = 2
    best_metric: str | None = None
    best_count: int = 1
    best_mode: str = "max"  # "max" or "min"

    @classmethod
    def from_config(cls, section) -> RetentionPolicy:
        """From a CheckpointConfig (or its dict); mode "auto" takes the metric's own direction."""
        d = section if isinstance(section, dict) else section.model_dump(mode="json")
        metric = d.get("keep_best_metric") or None
        mode = d.get("keep_best_mode") or "auto"
        if mode == "auto" and metric:
            from trainer.metric_keys import direction

            mode = direction(metric) or "max"
        return cls(
            keep=int(d.get("keep", 2)),
            best_metric=metric,
            best_count=int(d.get("keep_best", 1)),
            best_mode=mode if mode in ("max", "min") else "max",
        )


@dataclass
class Kept:
    """Why a checkpoint stays: "newest", "best <metric>", "pinned by <holder>" (empty: it goes)."""

    step: int
    reasons: list[str] = field(default_factory=list)


def retention(
    steps: list[int],
    policy: RetentionPolicy,
    metric_at: dict[int, float] | None = None,
    pins: dict[int, list[str]] | None = None,
) -> dict[int, list[str]]:
    """For each checkpoint step, the reasons it is kept (an empty list: it may be deleted).

    Newest `keep` by step; best `best_count` by the metric value at each step (steps with no finite
    value never count as best; ties go to the newer); every pinned step."""
    metric_at, pins = metric_at or {}, pins or {}
    ordered = sorted(steps)
    reasons: dict[int, list[str]] = {s: [] for s in ordered}
    for s in ordered[-policy.keep :] if policy.keep > 0 else []:
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
        new = [
            {"step": int(step), "holder": holder}
            for step, holder in dict.fromkeys(pins)
            if (int(step), holder) not in have
        ]
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
    """Bytes of the files in a checkpoint folder, its sharded weights (dcp/) included."""
    return sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())


def drop_stages(run_dir: Path) -> list[str]:
    """Remove the staging folders (.tmp-step-N) a killed attempt left: never committed, never read."""
    root = Path(run_dir) / CKPT_DIR
    gone = sorted(p.name for p in root.glob(".tmp-step-*")) if root.is_dir() else []
    for name in gone:
        shutil.rmtree(root / name, ignore_errors=True)
    return gone


def checkpoint_steps(
    total_updates: int, updates_per_step: int, every: int, first_update: int | None = None
) -> list[int]:
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
