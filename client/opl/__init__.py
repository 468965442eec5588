"""`import opl`: log any trainer's metrics to OffPolicy Lab, the W&B way.

    import opl
    run = opl.init(project="p", name="n", config={...})   # url/token: arguments, OPL_URL / OPL_TOKEN, ~/.config/opl
    run.log({"train/reward_mean": 0.5, "actor/pg_loss": 0.1}, step=10)   # or opl.log(...)
    run.log_samples([{"prompt": ..., "response": ..., "reward": 1.0}])
    run.finish()                                          # or: with opl.init(...) as run:

`opl.log` takes nested dicts ("a/b" keys) and `commit=False`, as `wandb.log` does, so a script can
switch with one import line. Nothing here blocks training: points go to an on-disk spool and a
background thread pushes them. `mode="offline"` writes only the spool; `opl sync DIR` uploads it.
"""

from opl_client.sdk import Run, current, init


def log(data: dict, step: int | None = None, commit: bool | None = None) -> None:
    current().log(data, step=step, commit=commit)


def log_samples(samples: list[dict], step: int | None = None, kind: str = "train") -> None:
    current().log_samples(samples, step=step, kind=kind)


def finish(exit_code: int = 0) -> None:
    current().finish(exit_code=exit_code)


__all__ = ["Run", "finish", "init", "log", "log_samples"]
