"""Readers of other trackers' histories: each returns a History (points in source order, the config
the source holds). TensorBoard needs the `tensorboard` package (`pip install ./client[tensorboard]`);
JSON lines and CSV need nothing."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from opl_client.sdk import as_number, flatten

STEP_FIELDS = ("step", "_step", "global_step", "Step", "iteration", "trainer/global_step")
# bookkeeping columns of W&B exports, verl's file backend, prime-rl and TensorBoard's CSV download
NOT_METRICS = {"_runtime", "_timestamp", "timestamp", "time", "Wall time", "elapsed_seconds", "wall_time"}


@dataclass
class History:
    points: list[tuple[int, str, float, float | None]] = field(default_factory=list)  # (step, key, value, time)
    config: dict = field(default_factory=dict)

    def deduplicated(self) -> list[tuple[int, str, float, float | None]]:
        """One value per (key, step), the last the source wrote, at the place its first came."""
        at: dict[tuple[str, int], int] = {}
        out: list[tuple[int, str, float, float | None]] = []
        for point in self.points:
            step, key = point[0], point[1]
            if (key, step) in at:
                out[at[key, step]] = point
            else:
                at[key, step] = len(out)
                out.append(point)
        return out


class HistoryError(ValueError):
    """A source that cannot be read: the message names the file and the line or field."""


def read_jsonl(path: Path) -> History:
    """verl's `file` backend ({"step", "data": {...}}), prime-rl's metrics.jsonl and any history of
    one JSON object per line with a step field (the line number when it has none). A line with a
    "config" object gives the config."""
    history = History()
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise HistoryError(f"{path}:{number}: not JSON ({exc})") from None
            if not isinstance(row, dict):
                raise HistoryError(f"{path}:{number}: a JSON object per line expected")
            if isinstance(row.get("config"), dict):
                history.config.update(row.pop("config"))
            step = _step(row, number - 1, f"{path}:{number}")
            when = _time(row)
            verl_file = isinstance(row.get("data"), dict)
            data = row["data"] if verl_file else row
            for key, value in flatten(data).items():
                number_value = as_number(value) if key not in STEP_FIELDS and key not in NOT_METRICS else None
                if number_value is None and isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
                    number_value = float(value.replace("Infinity", "inf"))
                if number_value is None and value is None and verl_file:
                    number_value = math.nan  # verl's file backend (orjson) writes NaN as null
                if number_value is not None:
                    history.points.append((step, key, number_value, when))
    return history


def read_csv(path: Path) -> History:
    """A header row, a step column (step, _step, global_step, Step), one column per metric; empty
    cells are no point. TensorBoard's own CSV download (Wall time, Step, Value) names its one metric
    after the file."""
    history = History()
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        columns = reader.fieldnames or []
        step_column = next((c for c in STEP_FIELDS if c in columns), None)
        single = set(columns) == {"Wall time", "Step", "Value"}
        for number, row in enumerate(reader, 2):
            step = int(float(row[step_column])) if step_column and row[step_column] else number - 2
            when = _time(row)
            for column, cell in row.items():
                if column in (step_column, None) or column in NOT_METRICS or cell in ("", None):
                    continue
                try:
                    value = float(cell)
                except ValueError:
                    continue  # a text column
                history.points.append((step, path.stem if single else column, value, when))
    return history


def read_tensorboard(path: Path) -> History:
    """Every scalar of the event files under `path` (a file or a folder): TF1/PyTorch simple values
    and TF2 scalar tensors, by tag and step."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util
    except ImportError:
        raise HistoryError(
            "reading TensorBoard files needs the tensorboard package: pip install './client[tensorboard]'"
        ) from None
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if "tfevents" in p.name and p.is_file())
    if not files:
        raise HistoryError(f"{path}: no TensorBoard event files (events.out.tfevents.*) in it")
    history = History()
    root = path if path.is_dir() else path.parent
    for file in files:
        folder = file.parent.relative_to(root).as_posix() if file.parent != root else ""
        for event in EventFileLoader(str(file)).Load():
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                if kind == "simple_value":
                    number = float(value.simple_value)
                elif kind == "tensor" and value.metadata.plugin_data.plugin_name in ("scalars", ""):
                    array = tensor_util.make_ndarray(value.tensor)
                    if array.size != 1 or array.dtype.kind not in "fiub":
                        continue
                    number = float(array.reshape(()))
                else:
                    continue
                key = _scalars_key(folder, value.tag)
                history.points.append((int(event.step), key, number, float(event.wall_time)))
    return history


def _scalars_key(folder: str, tag: str) -> str:
    """add_scalars("Reward", {"train": ..., "val": ...}) writes tag "Reward" into sub-folders
    Reward_train and Reward_val: those become the keys Reward/train and Reward/val."""
    last = folder.rsplit("/", 1)[-1]
    prefix = tag.replace("/", "_") + "_"
    if last.startswith(prefix) and len(last) > len(prefix):
        return f"{tag}/{last[len(prefix) :]}"
    return tag


READERS = {"tensorboard": read_tensorboard, "jsonl": read_jsonl, "csv": read_csv}


def guess_format(path: Path) -> str:
    if path.is_dir() or "tfevents" in path.name:
        return "tensorboard"
    if path.suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if path.suffix in (".csv", ".tsv"):
        return "csv"
    raise HistoryError(f"{path}: cannot tell its format from its name; say --format tensorboard, jsonl or csv")


def _step(row: dict, default: int, where: str) -> int:
    for name in STEP_FIELDS:
        if name in row:
            value = row[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise HistoryError(f"{where}: {name} must be a whole number >= 0, got {value!r}")
            return int(value)
    return default


def _time(row: dict) -> float | None:
    for name in ("_timestamp", "timestamp", "time", "Wall time", "wall_time"):
        try:
            value = float(row[name])
        except (KeyError, TypeError, ValueError):
            continue
        if math.isfinite(value) and value > 0:
            return value
    return None
