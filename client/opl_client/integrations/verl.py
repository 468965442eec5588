"""verl's tracking backend for OffPolicy Lab. verl's `Tracking` (verl/utils/tracking.py) keeps one
object per backend in `self.logger` and calls `log(data=..., step=...)` on each; its config is the
trainer's config. `register()` teaches Tracking the backend name "opl" and makes its `finish(exit_code)`
finish the opl run with that exit code (verl finishes only the backends it knows by name).

With the client installed, verl registers it by itself: the `verl.plugins` entry point
(opl_client.integrations.verl_plugin) runs in every process that imports verl, Ray actors
included, so `trainer.logger=['console','opl']` is the one line. Where entry points are turned off
(VERL_USE_EXTERNAL_PLUGINS=none), call `register()` in the process that builds Tracking.

`OplTracking` is that object, also usable on its own: OplTracking(project_name, experiment_name, config).
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from pathlib import Path
from typing import Any

BACKEND = "opl"


class OplTracking:
    def __init__(self, project_name: str, experiment_name: str, config: Any = None, **init: Any):
        from opl_client import sdk

        self.run = sdk.init(project=project_name, name=experiment_name, config=plain(config) or {}, **init)

    def log(self, data: dict, step: int) -> None:
        self.run.log(data, step=step)

    def finish(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)


def plain(config: Any) -> Any:
    """verl's config as plain data: an OmegaConf DictConfig resolved, dataclasses as dicts, enums by
    value, paths as text."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(config, (DictConfig, ListConfig)):
            return OmegaConf.to_container(config, resolve=True)
    except ImportError:
        pass
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return plain(dataclasses.asdict(config))
    if isinstance(config, dict):
        return {str(k): plain(v) for k, v in config.items()}
    if isinstance(config, (list, tuple)):
        return [plain(v) for v in config]
    if isinstance(config, Enum):
        return config.value
    if isinstance(config, Path):
        return str(config)
    return config


def register(tracking_class: Any = None) -> None:
    """Make verl's Tracking accept the backend "opl" (idempotent)."""
    if tracking_class is None:
        from verl.utils.tracking import Tracking as tracking_class
    if getattr(tracking_class, "_opl_registered", False):
        return
    original = tracking_class.__init__
    if BACKEND not in tracking_class.supported_backend:
        tracking_class.supported_backend = [*tracking_class.supported_backend, BACKEND]

    def __init__(self, project_name, experiment_name, default_backend="console", config=None, **kwargs):
        backends = [default_backend] if isinstance(default_backend, str) else list(default_backend)
        others = [b for b in backends if b != BACKEND]
        original(self, project_name, experiment_name, others or [], config=config, **kwargs)
        if BACKEND in backends:
            self.logger[BACKEND] = OplTracking(project_name, experiment_name, config)

    tracking_class.__init__ = __init__
    original_finish = getattr(tracking_class, "finish", None)

    def finish(self, exit_code: int = 0):
        try:
            if original_finish is not None:
                original_finish(self, exit_code=exit_code)
        finally:
            backend = getattr(self, "logger", {}).get(BACKEND)
            if backend is not None:
                backend.finish(exit_code=exit_code)

    tracking_class.finish = finish
    tracking_class._opl_registered = True
