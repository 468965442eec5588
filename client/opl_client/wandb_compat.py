"""The W&B objects a training script uses, for `import opl as wandb`: the run's config and summary,
Histogram, Table, Artifact and AlertLevel. What they record travels as run updates
(`POST /api/v1/runs/<id>/updates`, through the run's spool like its metrics)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

from opl_client.spool import json_number


def config_dict(config: Any) -> dict:
    """A config as a nested dict: a dict, argparse.Namespace, dataclass, OmegaConf DictConfig,
    pydantic model or anything with to_dict() (transformers' TrainingArguments). Nested sections
    stay sections."""
    if config is None:
        return {}
    if isinstance(config, Config):
        return config.as_dict()
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):
            return OmegaConf.to_container(config, resolve=True)
    except ImportError:
        pass
    if isinstance(config, Mapping):
        return {str(k): _section(v) for k, v in config.items()}
    if isinstance(config, argparse.Namespace):
        return {k: _section(v) for k, v in vars(config).items()}
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: _section(getattr(config, f.name)) for f in dataclasses.fields(config)}
    for method in ("model_dump", "to_dict"):
        if callable(getattr(config, method, None)):
            return config_dict(getattr(config, method)())
    raise TypeError(
        f"config: a dict, argparse.Namespace, dataclass or OmegaConf config expected, got {type(config).__name__}"
    )


def _section(value: Any) -> Any:
    """A config value: a nested config becomes a dict, anything else stays as it is."""
    if isinstance(value, (Mapping, argparse.Namespace, Config)) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        return config_dict(value)
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:
        pass
    return value


def jsonable(value: Any) -> Any:
    """A value as JSON holds it: NaN and infinities as "NaN"/"Infinity", numpy and torch values as
    numbers or lists, enums by value, paths and other objects as text."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return json_number(value)
    if isinstance(value, Enum):
        return jsonable(value.value)
    if hasattr(value, "tolist"):  # numpy and torch values and arrays
        return jsonable(value.tolist())
    if hasattr(value, "item"):
        return jsonable(value.item())
    if dataclasses.is_dataclass(value) and not isinstance(value, type) or isinstance(value, argparse.Namespace):
        return jsonable(config_dict(value))
    return str(value)


class Config:
    """wandb.config: item and attribute access, update(); a change after init reaches the dashboard."""

    def __init__(self, values: dict | None = None, on_change: Callable[[dict], None] | None = None):
        object.__setattr__(self, "_values", dict(values or {}))
        object.__setattr__(self, "_on_change", on_change)

    def update(self, values: Any = None, allow_val_change: bool | None = None, **more: Any) -> None:
        changed = {**config_dict(values), **config_dict(more)}
        if changed:
            self._values.update(changed)
            if self._on_change is not None:
                self._on_change(changed)

    def setdefaults(self, values: Any) -> None:
        self.update({k: v for k, v in config_dict(values).items() if k not in self._values})

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __setattr__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __getattr__(self, key: str) -> Any:
        try:
            return self._values[key]
        except KeyError:
            raise AttributeError(f"config has no {key!r}") from None

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def keys(self):
        return self._values.keys()

    def items(self):
        return self._values.items()

    def values(self):
        return self._values.values()

    def as_dict(self) -> dict:
        return dict(self._values)

    def __repr__(self) -> str:
        return f"Config({self._values!r})"


class Summary:
    """run.summary: the last value of every logged metric, and what the script sets
    (summary["best"] = x, summary.update({...})), which reaches the dashboard."""

    def __init__(self, on_change: Callable[[dict], None] | None = None):
        self._values: dict[str, Any] = {}
        self._on_change = on_change

    def update(self, values: Mapping | None = None, **more: Any) -> None:
        changed = {**dict(values or {}), **more}
        if changed:
            self._values.update(changed)
            if self._on_change is not None:
                self._on_change({str(k): jsonable(v) for k, v in changed.items()})

    def __setitem__(self, key: str, value: Any) -> None:
        self.update({key: value})

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __iter__(self):
        return iter(self._values)

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def keys(self):
        return self._values.keys()

    def items(self):
        return self._values.items()

    def _logged(self, values: Mapping) -> None:
        """The last logged values (kept here only: the dashboard summarises the series itself)."""
        self._values.update(values)

    def __repr__(self) -> str:
        return f"Summary({self._values!r})"


class Histogram:
    """wandb.Histogram(values, num_bins=64) or Histogram(np_histogram=(counts, edges)); logged with
    run.log({"key": Histogram(...)}) at the call's step."""

    def __init__(self, sequence: Any = None, np_histogram: tuple | None = None, num_bins: int = 64):
        if np_histogram is not None:
            counts, edges = np_histogram
            self.counts, self.bins = [float(c) for c in _flat(counts)], [float(e) for e in _flat(edges)]
        else:
            values = [float(v) for v in _flat(sequence if sequence is not None else [])]
            self.counts, self.bins = _histogram([v for v in values if math.isfinite(v)], max(1, int(num_bins)))
        if len(self.bins) != len(self.counts) + 1:
            raise ValueError(f"np_histogram: {len(self.counts) + 1} bin edges expected, got {len(self.bins)}")

    def update(self, key: str, step: int) -> dict:
        return {"kind": "histogram", "key": key, "step": step, "bins": self.bins, "counts": self.counts}


def _flat(values: Any) -> list:
    if hasattr(values, "tolist"):
        values = values.tolist()
    if not isinstance(values, (list, tuple)):
        return [values]
    out = []
    for value in values:
        out.extend(_flat(value) if isinstance(value, (list, tuple)) or hasattr(value, "tolist") else [value])
    return out


def _histogram(values: list[float], bins: int) -> tuple[list[float], list[float]]:
    """numpy.histogram's counts and edges, without numpy."""
    if not values:
        return [0.0] * bins, [float(i) / bins for i in range(bins + 1)]
    low, high = min(values), max(values)
    if low == high:
        low, high = low - 0.5, high + 0.5
    width = (high - low) / bins
    counts = [0.0] * bins
    for value in values:
        counts[min(bins - 1, int((value - low) / width))] += 1
    return counts, [low + i * width for i in range(bins)] + [high]


class Table:
    """wandb.Table(columns=[...], data=[[...], ...]) and add_data(*row); logged with
    run.log({"key": table}). Where its columns are prompt/response/reward the dashboard also shows
    its rows as samples."""

    def __init__(
        self,
        columns: list[str] | None = None,
        data: list | None = None,
        rows: list | None = None,
        dataframe: Any = None,
        **_: Any,
    ):
        if dataframe is not None:  # a pandas DataFrame
            columns, data = list(dataframe.columns), dataframe.values.tolist()
        rows = data if data is not None else rows
        self.columns = [str(c) for c in (columns or [])]
        self.data: list[list] = [list(r) for r in (rows or [])]
        if not self.columns and self.data:
            self.columns = [f"col{i}" for i in range(len(self.data[0]))]

    def add_data(self, *row: Any) -> None:
        if len(row) != len(self.columns):
            raise ValueError(f"Table.add_data: {len(self.columns)} values expected, got {len(row)}")
        self.data.append(list(row))

    def add_column(self, name: str, data: list) -> None:
        self.columns.append(str(name))
        for row, value in zip(self.data, data, strict=True):
            row.append(value)

    def update(self, key: str, step: int) -> dict:
        return {"kind": "table", "key": key, "step": step, "columns": self.columns, "rows": jsonable(self.data)}


class Artifact:
    """wandb.Artifact: files and references are recorded by path (opl uploads no files)."""

    def __init__(self, name: str, type: str = "artifact", description: str | None = None, metadata: dict | None = None):
        self.name, self.type, self.description, self.metadata = name, type, description, metadata or {}
        self.paths: list[str] = []

    def add_file(self, local_path: str, name: str | None = None, **_: Any) -> None:
        self.paths.append(os.path.abspath(local_path))

    def add_dir(self, local_path: str, name: str | None = None, **_: Any) -> None:
        self.paths.append(os.path.abspath(local_path))

    def add_reference(self, uri: str, name: str | None = None, **_: Any) -> None:
        self.paths.append(str(uri))


def artifact_reference(artifact: Any, name: str | None) -> tuple[str, str]:
    """(name, where) of what log_artifact was given: an Artifact, a path or a URI."""
    if isinstance(artifact, Artifact):
        return name or artifact.name, ", ".join(artifact.paths)
    where = str(artifact) if "://" in str(artifact) else os.path.abspath(str(artifact))
    return name or Path(str(artifact)).name, where


class AlertLevel(str, Enum):
    INFO = "info"
    WARN = "warn"
    ERROR = "error"


def alert_level(level: Any) -> str:
    """W&B's AlertLevel (or its name) as the dashboard's level: info, warn or error."""
    text = str(getattr(level, "value", level) or "info").lower()
    text = {"warning": "warn", "critical": "error", "fatal": "error"}.get(text, text)
    return text if text in ("info", "warn", "error") else "info"


class Media:
    """wandb.Image, Audio, Video, Html, Object3D, Molecule: accepted so a script runs; opl records
    no media, and logging one is counted in sdk/errors and named once."""

    def __init__(self, *args: Any, **kwargs: Any):
        pass


class Image(Media):
    pass


class Audio(Media):
    pass


class Video(Media):
    pass


class Html(Media):
    pass


class Object3D(Media):
    pass


class Molecule(Media):
    pass


class Settings:
    """wandb.Settings(...): accepted for init(settings=...), with no effect."""

    def __init__(self, **kwargs: Any):
        self.__dict__.update(kwargs)
