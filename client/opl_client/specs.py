"""Experiment specs from YAML files: an experiment file (name, project, sweep, ..., config:) or a
plain run config (model:, algorithm:, ...), as the dashboard's import takes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXPERIMENT_KEYS = {"name", "project", "config", "sweep", "random", "seeds", "priority", "tags", "notes", "warmup_run"}


def experiment_spec(spec: dict | str | Path, **overrides: Any) -> dict:
    if isinstance(spec, (str, Path)):
        path = Path(spec)
        import yaml

        data = yaml.safe_load(path.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping at the top, got {type(data).__name__}")
        spec = data if "config" in data or not set(data) - EXPERIMENT_KEYS else {"config": data}
        spec.setdefault("name", path.stem)
    spec = {**spec, **{k: v for k, v in overrides.items() if v is not None}}
    return spec
