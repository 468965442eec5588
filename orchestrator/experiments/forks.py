"""Forks: runs that start from another run's checkpoint (config `init.from_run`, `init.from_step`).

At creation `fork_plan` checks every distinct source of an experiment's runs (a sweep forked from
one checkpoint checks it once): the caller may read the parent run, the parent trains the same
model, and the checkpoint exists or will exist (a step the parent's schedule writes and has not
passed yet). A parent that has ended and was named without a step is pinned to its newest
checkpoint, so the run, its retries and its lineage all mean the same weights. After the runs
exist, `pin_sources` pins each step in the parent's pins.json, which the trainer's clean-up
respects (a fork of the final checkpoint of a parent still running is pinned at submission, by
cluster/jobspec.py, once that step is known). A fork whose checkpoint is not written yet waits in
the queue (`waiting_for_parent`, `held_by_parent`).

Every refusal is a ConfigError naming the field (config.init.from_run, config.init.from_step, ...).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, Q

from orchestrator.experiments.access import role_in, visible_runs
from orchestrator.experiments.models import Membership, Run
from orchestrator.experiments.run_dirs import run_dir_for
from orchestrator.experiments.runconfig import ConfigError
from trainer.ckpt import checkpoint_files as ckpt
from trainer.config import RunConfig, derive_sizes

log = logging.getLogger(__name__)
FROM_RUN, FROM_STEP, FROM_PATH = "config.init.from_run", "config.init.from_step", "config.init.from_path"


@dataclass(frozen=True)
class ForkSource:
    parent: Run
    step: int | None  # the checkpoint's update count; None: the parent's newest once it has ended
    on_disk: bool  # the checkpoint existed when the fork was created


def _error(field: str, message: str) -> ConfigError:
    return ConfigError([{"field": field, "message": message}])


def _listed(steps: list[int]) -> str:
    return ", ".join(str(s) for s in steps[:12]) + (", …" if len(steps) > 12 else "")


def _steps_text(steps: list[int]) -> str:
    return f"it has {_listed(steps)}" if steps else "it has none"


def scheduled_steps(config: dict[str, Any]) -> list[int]:
    """The updates a run with this (full) config writes checkpoints at, unless stopped early."""
    cfg = RunConfig.model_validate(config)
    sizes = derive_sizes(cfg)
    return ckpt.checkpoint_steps(sizes.total_updates, sizes.updates_per_step, cfg.checkpoint.every)


def check_source(*, user: User, config: dict[str, Any]) -> ForkSource | None:
    """The checkpoint a (validated) config forks from, checked for this user; None if no fork."""
    init = config.get("init") or {}
    parent_id, step = init.get("from_run"), init.get("from_step")
    if init.get("from_path"):  # resolved and checked against the data roots by validate_run_config
        if parent_id is not None:
            raise _error(
                FROM_PATH, "set init.from_run (a run of this dashboard) or init.from_path (a cluster file), not both"
            )
        return None
    if parent_id is None:
        return None
    parent = visible_runs(user).filter(pk=parent_id).first()
    if parent is None:  # the same answer for a run that does not exist and one the user cannot read
        raise _error(FROM_RUN, f"run {parent_id} does not exist or you cannot read it")
    if not may_fork(user, parent):
        raise _error(
            FROM_RUN,
            f"run {parent_id} is in project {parent.experiment.project.name}, where you are a viewer: "
            "a fork pins the parent's checkpoints on that project's disk, so it takes the "
            "member or owner role there",
        )
    _check_same_model(parent, config)
    on_disk = [ckpt.checkpoint_step(c) for c in ckpt.list_checkpoints(run_dir_for(parent))]
    if step is None:
        if not parent.is_terminal:
            return ForkSource(parent, None, False)  # its final checkpoint: the fork waits for it
        if not on_disk:
            raise _error(FROM_RUN, f"run {parent_id} ended ({parent.state}) without a checkpoint to start from")
        return ForkSource(parent, on_disk[-1], True)
    if step in on_disk:
        return ForkSource(parent, step, True)
    if parent.is_terminal:
        raise _error(FROM_STEP, f"run {parent_id} has no checkpoint at update {step} ({_steps_text(on_disk)})")
    planned = scheduled_steps(parent.config)
    if step not in planned:
        raise _error(
            FROM_STEP, f"run {parent_id} writes checkpoints at updates {_listed(planned)}; {step} is not one of them"
        )
    if step <= parent.step:
        raise _error(
            FROM_STEP,
            f"run {parent_id} is past update {step} and its checkpoint there was not kept ({_steps_text(on_disk)})",
        )
    return ForkSource(parent, step, False)


def may_fork(user: User, parent: Run) -> bool:
    """Forking needs a writer's role (owner or member) in the parent's project, not only read
    access: the fork's pin keeps the parent's checkpoint on that project's disk until the fork
    ends, which is a write on the project. Viewers read only."""
    return user.is_staff or role_in(user, parent.experiment.project_id) in Membership.WRITERS


def _check_same_model(parent: Run, config: dict[str, Any]) -> None:
    mine, theirs = config.get("model") or {}, parent.config.get("model") or {}
    differ = [f for f in ckpt.WEIGHT_DEFINING_FIELDS if mine.get(f) != theirs.get(f)]
    if differ:
        field = differ[0]
        raise _error(
            f"config.model.{field}",
            f"run {parent.pk} has model.{field} {theirs.get(field)!r}; "
            "a fork starts from its weights, so it keeps its model",
        )


@dataclass(frozen=True)
class Fork:
    config: dict[str, Any]  # the run's config, init.from_step fixed where the source resolved it
    parent_id: int | None
    parent_step: int | None
    source: ForkSource | None


def fork_plan(*, user: User, configs: list[dict[str, Any]]) -> list[Fork]:
    """Check the fork source of every config (each distinct source once) and return, per config,
    its lineage and its config with the resolved step."""
    checked: dict[tuple, ForkSource | None] = {}
    out = []
    for config in configs:
        init = config.get("init") or {}
        key = (init.get("from_run"), init.get("from_step"), init.get("from_path"))
        if key not in checked:
            checked[key] = check_source(user=user, config=config)
        source = checked[key]
        if source is None:
            out.append(Fork(config, None, None, None))
            continue
        if source.step is not None and init.get("from_step") is None:
            config = copy.deepcopy(config)
            config["init"]["from_step"] = source.step
        out.append(Fork(config, source.parent.pk, source.step, source))
    return out


def pin_sources(runs: list[Run], forks: list[Fork]) -> None:
    """Pin each fork's checkpoint for its run (one write per parent), then make sure the parent's
    clean-up did not delete it between the check and the pin: a step seen on disk must still be
    there, and a step still to come must not be older than a checkpoint already written
    (checkpoints come in order, and once pinned the step is never deleted)."""
    by_parent: dict[int, list[tuple[Run, Fork]]] = {}
    for run, fork in zip(runs, forks, strict=True):
        if fork.source is not None and fork.parent_step is not None:
            by_parent.setdefault(fork.parent_id, []).append((run, fork))
    for parent_id, pairs in by_parent.items():
        parent_dir = run_dir_for(pairs[0][1].source.parent)
        pins = [(fork.parent_step, f"run {run.pk}") for run, fork in pairs]
        try:
            ckpt.add_pins(parent_dir, pins)
        except (OSError, ValueError) as exc:
            raise _error(FROM_RUN, f"cannot pin run {parent_id}'s checkpoint in {parent_dir}: {exc}") from None
        if (problem := _lost_step(parent_id, parent_dir, pairs)) is not None:
            ckpt.remove_pins(parent_dir, pins)  # the creation is refused: these runs will not exist
            raise problem


def release_pins(*, run_id: int, parent_id: int, parent_dir: Path | None = None) -> int:
    """Take back every pin the run holds in its parent's pins.json (the fork ended without needing
    the checkpoint any more, or was deleted): the parent's clean-up may then delete those
    checkpoints. Returns how many pins went; never raises (a pin left behind only keeps disk)."""
    if parent_dir is None:
        row = Run.objects.filter(pk=parent_id).values_list("run_dir", flat=True).first()
        parent_dir = run_dir_for(Run(pk=parent_id, run_dir=row or ""))
    holder = f"run {run_id}"
    try:
        mine = [(step, holder) for step, holders in ckpt.read_pins(parent_dir).items() if holder in holders]
        if mine:
            ckpt.remove_pins(parent_dir, mine)
    except (OSError, ValueError) as exc:
        log.warning("run %s: could not release its pins in %s: %s", run_id, parent_dir, exc)
        return 0
    return len(mine)


def release_pins_of_deleted(sender, instance: Run, **kwargs) -> None:
    """pre_delete of a Run (the admin, a cascade from its experiment): its pins go once the delete
    commits. The parent's folder is read now, while the parent surely still exists."""
    if instance.parent_id is None:
        return
    parent = Run.objects.filter(pk=instance.parent_id).values_list("run_dir", flat=True).first()
    parent_dir = run_dir_for(Run(pk=instance.parent_id, run_dir=parent or ""))
    run_id, parent_id = instance.pk, instance.parent_id
    transaction.on_commit(lambda: release_pins(run_id=run_id, parent_id=parent_id, parent_dir=parent_dir), robust=True)


def _lost_step(parent_id: int, parent_dir: Path, pairs: list[tuple[Run, Fork]]) -> ConfigError | None:
    now = [ckpt.checkpoint_step(c) for c in ckpt.list_checkpoints(parent_dir)]
    for step in sorted({fork.parent_step for _, fork in pairs}):
        if step in now:
            continue
        if now and now[-1] > step:
            return _error(
                FROM_STEP,
                f"run {parent_id} went past update {step} and cleaned up its checkpoint "
                f"there while this run was created ({_steps_text(now)}); choose another step",
            )
        if any(fork.source.on_disk for _, fork in pairs if fork.parent_step == step):
            return _error(
                FROM_STEP,
                f"run {parent_id}'s checkpoint at update {step} was cleaned up "
                "while this run was created; choose another step",
            )
    return None


def fork_spec(run: Run, step: int | None, *, project: str | None) -> dict[str, Any]:
    """The new-experiment form's starting point for "Fork from here": the run's config, starting
    from its checkpoint at `step` (weights only; the form's init.optimizer takes the optimizer too)."""
    from orchestrator.experiments.schema_form import minimal_config

    config = minimal_config(run.config)
    config["init"] = {"from_run": run.pk, "from_step": step, "optimizer": False}
    suffix = f"-from-{step}" if step is not None else "-fork"
    return {
        "name": f"{run.name[:180]}{suffix}",
        "project": project,
        "config": config,
        "tags": sorted(t.name for t in run.tags.all()),
    }


# --- the queue ---------------------------------------------------------------------------------


def waiting_for_parent() -> Q:
    """Queued forks whose checkpoint is not written yet: the parent has not ended and has not
    passed the step (its progress is past the step only once that checkpoint is committed)."""
    return (
        Q(parent__isnull=False)
        & ~Q(parent__state__in=Run.TERMINAL)
        & (Q(parent_step__isnull=True) | Q(parent__step__lte=F("parent_step")))
    )


def held_by_parent(runs: list[Run]) -> dict[int, str]:
    """Why each of these queued forks waits for its parent, in plain words (one query)."""
    forks = [r for r in runs if r.parent_id and r.state == Run.State.QUEUED]
    if not forks:
        return {}
    parents = {
        p["id"]: p for p in Run.objects.filter(pk__in={r.parent_id for r in forks}).values("id", "state", "step")
    }
    reasons = {}
    for run in forks:
        parent = parents.get(run.parent_id)
        if parent is None or parent["state"] in Run.TERMINAL:
            continue
        if run.parent_step is None:
            reasons[run.pk] = f"waiting for run {run.parent_id} to end (forked from its final checkpoint)"
        elif parent["step"] <= run.parent_step:
            reasons[run.pk] = f"waiting for run {run.parent_id} to reach update {run.parent_step} (at {parent['step']})"
    return reasons
