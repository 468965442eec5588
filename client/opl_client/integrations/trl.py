"""A `transformers.TrainerCallback` that logs a Trainer's run to OffPolicy Lab: TRL's trainers
(GRPOTrainer, PPOTrainer, ...) take it like any transformers Trainer. Importing this module (or
`opl.trl`) adds "opl" to transformers' integration registry, so the one line is either

    import opl.trl                                   # then GRPOConfig(..., report_to="opl")
    trainer = GRPOTrainer(..., callbacks=[OplCallback(project="p")])   # or with arguments

With report_to="opl" the run's project and name come from OPL_PROJECT and the run_name argument.

It opens the run at the start of training with the TrainingArguments as its config, logs every
`on_log` scalar at the trainer's global step (named as W&B's callback names them: train/loss,
eval/loss), logs TRL's completion logs as rollout samples (GRPO's `_logs`: prompts, completions,
rewards, advantages; the trainer is found when it is built, or pass `trainer=`), kind "eval" for
those an evaluation produced, and finishes the run when training ends. If `train()` raises, even
when the script catches it, the run ends failed. `callback.run` stays the run after training. Only
the main process logs.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

from transformers import Trainer, TrainerCallback
from transformers.integrations import integration_utils

from opl_client import sdk

SKIPPED = {"total_flos", "train_runtime", "train_samples_per_second", "train_steps_per_second"}


def metric_name(key: str) -> str:
    """loss -> train/loss, eval_loss -> eval/loss, rewards/accuracy/mean -> train/rewards/accuracy/mean."""
    for prefix in ("eval", "test"):
        if key.startswith(f"{prefix}_"):
            return f"{prefix}/{key[len(prefix) + 1 :]}"
    return f"train/{key}"


class OplCallback(TrainerCallback):
    def __init__(self, *, trainer: Any = None, samples_per_log: int = 8, finish_on_train_end: bool = True, **init):
        """`init`: the arguments of opl.init (project, name, config, tags, url, token, mode, ...)."""
        self.init = init
        self.trainer = trainer
        self.samples_per_log = samples_per_log
        self.finish_on_train_end = finish_on_train_end
        self.run: sdk.Run | None = None
        self._last_batch: tuple | None = None

    def watch(self, trainer: Any) -> OplCallback:
        """Read TRL's completion logs from this trainer (GRPOTrainer keeps them in `_logs`), and end
        the run failed when its train() raises."""
        self.trainer = trainer
        if getattr(trainer, "_opl_train_wrapped", False):
            return self
        train = trainer.train

        def train_and_end_failed_on_a_crash(*args, **kwargs):
            try:
                return train(*args, **kwargs)
            except BaseException:
                if self.run is not None:
                    self.run.finish(exit_code=1)
                raise

        trainer.train = train_and_end_failed_on_a_crash
        trainer._opl_train_wrapped = True
        return self

    def on_init_end(self, args, state, control, **kwargs):
        if self.trainer is None:
            trainer = _calling_trainer()
            if trainer is not None:
                self.watch(trainer)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero or (self.run is not None and not self.run._finished):
            return
        config = {k: v for k, v in args.to_dict().items() if not k.endswith("_token") and k != "push_to_hub_token"}
        name_or_path = getattr(getattr(model, "config", None), "_name_or_path", None)
        if name_or_path:
            config["model_name_or_path"] = name_or_path
        config.update(self.init.get("config") or {})
        name = self.init.get("name") or (sdk.safe_name(args.run_name) if args.run_name else None)
        self.run = sdk.init(**{**self.init, "config": config, "name": name})

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.run is None or self.run._finished or not state.is_world_process_zero or not logs:
            return
        # TRL logs None for a metric with no valid value in the window: no point, and no error
        scalars = {metric_name(k): v for k, v in logs.items() if k not in SKIPPED and v is not None}
        self.run.log(scalars, step=state.global_step)
        kind = "eval" if any(k.startswith("eval_") for k in logs) else "train"
        self._log_completions(state.global_step, kind)

    def on_train_end(self, args, state, control, **kwargs):
        if self.run is not None and self.finish_on_train_end:
            self.run.finish()

    def _log_completions(self, step: int, kind: str) -> None:
        logs = getattr(self.trainer, "_logs", None)
        if not isinstance(logs, dict) or not logs.get("completion"):
            return
        prompts, completions = list(logs.get("prompt") or []), list(logs["completion"])
        batch = (tuple(map(str, prompts)), tuple(map(str, completions)))
        if batch == self._last_batch:  # the same completions at a second log (the end-of-training summary)
            return
        self._last_batch = batch
        rewards = {name: list(values) for name, values in (logs.get("rewards") or {}).items()}
        advantages = list(logs.get("advantages") or [])
        samples = []
        for i, completion in enumerate(completions[: self.samples_per_log]):
            total = sum(values[i] for values in rewards.values() if i < len(values) and values[i] is not None)
            sample = {
                "prompt": _text(prompts[i] if i < len(prompts) else ""),
                "response": _text(completion),
                "reward": float(total) if rewards else None,
            }
            if i < len(advantages):
                sample["advantage"] = float(advantages[i])
            samples.append(sample)
        self.run.log_samples(samples, step=step, kind=kind)


def _calling_trainer() -> Any:
    """The Trainer whose __init__ is calling on_init_end (report_to="opl" builds the callback
    without arguments, so this is how it finds the completion logs)."""
    frame = inspect.currentframe()
    for _ in range(12):
        frame = frame.f_back if frame is not None else None
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
    return None


def _text(value: Any) -> str:
    """A completion or prompt as text: conversational ones (lists of messages) as their contents."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, dict) and "content" in m for m in value):
        return "\n".join(str(m["content"]) for m in value)
    return json.dumps(value, default=str)


# report_to="opl": transformers builds the callbacks it names from this registry
integration_utils.INTEGRATION_TO_CALLBACK.setdefault("opl", OplCallback)
