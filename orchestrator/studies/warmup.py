"""Experiments with a warm-up run: one run trains first, and every run of the sweep forks from it.

A staleness study starts from a trained, peaked policy, not random init (reference: the paper's
regime, and STALENESS_PROBE.md). The experiment spec's `warmup_run` holds config overrides for that
one run; it is created as its own experiment ("<name>-warmup", same project, tags and priority),
and the sweep's config gains `init.from_run` = the warm-up run, with no step: each fork then waits
in the queue until the warm-up has ended and starts from its final checkpoint (experiments/forks.py).

More than one warm-up: `warmup_run: {count: 3, ...}` trains three warm-up runs (seeds train.seed,
+1, +2: three different checkpoints) and the sweep gains the field `init.from_run` over them, so
every cell's seeds are nested inside each warm-up. A study forked from one checkpoint measures
that checkpoint: another warm-up moved the staleness gap by several times the seeds' standard
error. The statistics pool a cell's runs over its warm-ups (`init.from_run` is a nesting field, not
a cell) and report the between-warm-up spread beside the seed spread.

Both experiments are created in one transaction, so a sweep that is refused leaves no orphan
warm-up run behind.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from orchestrator.experiments.models import Experiment, Run
from orchestrator.experiments.runconfig import ConfigError, merge_config
from orchestrator.experiments.services import experiment_create, experiment_plan

FIELD = "warmup_run"
SUFFIX = "-warmup"
COUNT = "count"  # in warmup_run: how many warm-up runs (checkpoints) the sweep forks from
MAX_WARMUPS = 10
NESTING_PATH = "init.from_run"  # swept over the warm-ups: seeds nest inside it, it makes no cell


def warmup_count(overrides: dict[str, Any] | None) -> int:
    """How many warm-up runs `overrides` asks for (1 without `count`); errors name warmup_run.count."""
    if not overrides:
        return 0
    count = overrides.get(COUNT, 1) if isinstance(overrides, dict) else 1
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_WARMUPS:
        raise ConfigError(
            [
                {
                    "field": f"{FIELD}.{COUNT}",
                    "message": f"must be a whole number from 1 to {MAX_WARMUPS} (got {count!r})",
                }
            ]
        )
    return count


def warmup_config(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The warm-up run's config: the experiment's config with the overrides, starting fresh
    (an init section of the experiment's config is the sweep's, not the warm-up's, unless the
    overrides name one)."""
    if not isinstance(overrides, dict):
        raise ConfigError(
            [{"field": FIELD, "message": "must be a mapping of config sections (e.g. {train: {steps: 200}})"}]
        )
    base = {k: v for k, v in config.items() if k != "init"}
    return merge_config(base, {k: v for k, v in overrides.items() if k != COUNT})


def forked_config(config: dict[str, Any], warmup_run_id: int) -> dict[str, Any]:
    out = copy.deepcopy(config)
    out["init"] = {**(out.get("init") or {}), "from_run": warmup_run_id, "from_step": None, "from_path": None}
    return out


def _prefixed(exc: ConfigError) -> ConfigError:
    return ConfigError([{**e, "field": f"{FIELD}.{e['field'].removeprefix('config.')}"} for e in exc.errors])


def check_warmup(name: str, config: dict[str, Any], overrides: dict[str, Any] | None) -> int:
    """Validate the warm-up run's config without writing anything; the number of warm-up runs it
    adds (0 without overrides). Errors name warmup_run.<section>.<field>."""
    return len(warmup_plans(name, config, overrides))


def warmup_plans(name: str, config: dict[str, Any], overrides: dict[str, Any] | None) -> list:
    """The warm-up runs as planned (none without overrides), for the preview's first rows; errors as check_warmup."""
    count = warmup_count(overrides)
    if not count:
        return []
    try:
        plans = experiment_plan(name=name + SUFFIX, config=warmup_config(config, overrides), seeds=count)
        if count > 1:  # named as the preview lists them: the warm-up experiment and each run's seed
            plans = [replace(p, name=f"{name}{SUFFIX} {p.name}") for p in plans]
        return plans
    except ConfigError as exc:
        raise _prefixed(exc) from None


def forks_planned(planned: list, overrides: dict[str, Any] | None) -> list:
    """The sweep's planned runs as they will be queued: once per warm-up when there are several
    (the warm-ups do not exist yet, so each copy names its warm-up by number in init.from_run)."""
    count = warmup_count(overrides)
    if count <= 1:
        return planned
    return [replace(p, values={**p.values, NESTING_PATH: f"warm-up {i + 1}"}) for i in range(count) for p in planned]


@transaction.atomic
def experiment_create_with_warmup(*, owner: User, warmup_run: dict[str, Any] | None = None, **spec: Any) -> Experiment:
    """experiment_create, with the warm-up run first when `warmup_run` is given."""
    if not warmup_run:
        return experiment_create(owner=owner, **spec)
    count = warmup_count(warmup_run)
    try:
        warm = experiment_create(
            owner=owner,
            name=spec["name"] + SUFFIX,
            config=warmup_config(spec["config"], warmup_run),
            seeds=count,
            project=spec.get("project"),
            priority=spec.get("priority", 0),
            tags=spec.get("tags"),
            notes=f"The warm-up run(s) every run of experiment '{spec['name']}' starts from.",
        )
    except ConfigError as exc:
        raise _prefixed(exc) from None
    warm_ids = list(Run.objects.filter(experiment=warm).order_by("seed", "id").values_list("pk", flat=True))
    forked = {**spec, "config": forked_config(spec["config"], warm_ids[0])}
    if count > 1:  # every cell's seeds, once per warm-up
        forked["sweep"] = {**(spec.get("sweep") or {}), NESTING_PATH: warm_ids}
    return experiment_create(owner=owner, **forked)
