"""`import opl`: log any trainer's metrics to OffPolicy Lab, the W&B way. A W&B script runs with one
changed line, `import opl as wandb`:

    import opl as wandb
    wandb.init(project="p", name="n", config=args)      # dict, argparse.Namespace, dataclass, OmegaConf
    wandb.config.lr; wandb.config.update({"warmup": 10})
    wandb.define_metric("eval/acc", summary="max")
    wandb.log({"train/reward": 0.5, "grad": wandb.Histogram(values)}, step=10)
    wandb.summary["best"] = 0.9
    wandb.alert(title="reward collapsed", text="...")
    wandb.finish(exit_code=1)                            # the run ends failed

url/token come from arguments, OPL_URL / OPL_TOKEN or ~/.config/opl. Nothing here blocks training
or raises into it after init: points go to an on-disk spool and a background thread pushes them;
what cannot be recorded is counted in the run's sdk/errors and named once. `mode="offline"` writes
only the spool; `opl sync DIR` uploads it. docs/TRACKING.md has the details.
"""

from typing import Any

from opl_client.sdk import Run, current, init
from opl_client.wandb_compat import (
    AlertLevel,
    Artifact,
    Audio,
    Config,
    Histogram,
    Html,
    Image,
    Molecule,
    Object3D,
    Settings,
    Table,
    Video,
)


def log(data: dict, step: int | None = None, commit: bool | None = None, **kwargs: Any) -> None:
    current().log(data, step=step, commit=commit, **kwargs)


def log_samples(
    samples: list[dict], step: int | None = None, kind: str = "train", corrections: dict | None = None
) -> None:
    current().log_samples(samples, step=step, kind=kind, corrections=corrections)


def finish(exit_code: int = 0, quiet: bool | None = None) -> None:
    from opl_client import sdk

    if sdk._current is not None:
        sdk._current.finish(exit_code=exit_code)


def define_metric(name: str, step_metric: str | None = None, summary: str | None = None, **kwargs: Any) -> None:
    current().define_metric(name, step_metric=step_metric, summary=summary, **kwargs)


def alert(title: str, text: str = "", level: Any = None, wait_duration: Any = None) -> None:
    current().alert(title, text, level=level, wait_duration=wait_duration)


def watch(*args: Any, **kwargs: Any) -> None:
    current().watch(*args, **kwargs)


def unwatch(*args: Any, **kwargs: Any) -> None:
    return None


def save(glob_str: str | None = None, base_path: str | None = None, policy: str = "live") -> list:
    return current().save(glob_str, base_path, policy)


def log_artifact(artifact: Any, name: str | None = None, type: str | None = None, **kwargs: Any) -> Any:
    return current().log_artifact(artifact, name=name, type=type, **kwargs)


def use_artifact(*args: Any, **kwargs: Any) -> Any:
    return current().use_artifact(*args, **kwargs)


def login(*args: Any, **kwargs: Any) -> bool:
    """W&B's login: opl reads its token from OPL_TOKEN or ~/.config/opl, so there is nothing to do."""
    return True


_detached_config = Config()


def __getattr__(name: str) -> Any:
    """wandb.run, wandb.config and wandb.summary: those of the open run (run is None before init)."""
    from opl_client import sdk

    if name == "run":
        return sdk._current
    if name == "config":
        return sdk._current.config if sdk._current is not None else _detached_config
    if name == "summary":
        return current().summary
    raise AttributeError(f"module 'opl' has no attribute {name!r}")


__all__ = [
    "AlertLevel",
    "Artifact",
    "Audio",
    "Histogram",
    "Html",
    "Image",
    "Molecule",
    "Object3D",
    "Run",
    "Settings",
    "Table",
    "Video",
    "alert",
    "define_metric",
    "finish",
    "init",
    "log",
    "log_artifact",
    "log_samples",
    "login",
    "save",
    "unwatch",
    "use_artifact",
    "watch",
]
