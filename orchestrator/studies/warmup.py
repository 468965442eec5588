"""Experiments with a warm-up run: one run trains first, and every run of the sweep forks from it.

A staleness study starts from a trained, peaked policy, not random init (reference: the paper's
regime, and STALENESS_PROBE.md). The experiment spec's `warmup_run` holds config overrides for that
one run; it is created as its own experiment ("<name>-warmup", same project, tags and priority),
and the sweep's config gains `init.from_run` = the warm-up run, with no step: each fork then waits
in the queue until the warm-up has ended and starts from its final checkpoint (experiments/forks.py).

Both experiments are created in one transaction, so a sweep that is refused leaves no orphan
warm-up run behind.
"""

from __future__ import annotations

import copy
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from orchestrator.experiments.models import Experiment, Run
from orchestrator.experiments.runconfig import ConfigError, merge_config
from orchestrator.experiments.services import experiment_create, experiment_plan

FIELD = "warmup_run"
SUFFIX = "-warmup"


def warmup_config(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The warm-up run's config: the experiment's config with the overrides, starting fresh
    (an init section of the experiment's config is the sweep's, not the warm-up's, unless the
    overrides name one)."""
    if not isinstance(overrides, dict):
        raise ConfigError(
            [{"field": FIELD, "message": "must be a mapping of config sections (e.g. {train: {steps: 200}})"}]
        )
    base = {k: v for k, v in config.items() if k != "init"}
    return merge_config(base, overrides)


def forked_config(config: dict[str, Any], warmup_run_id: int) -> dict[str, Any]:
    out = copy.deepcopy(config)
    out["init"] = {**(out.get("init") or {}), "from_run": warmup_run_id, "from_step": None, "from_path": None}
    return out


def _prefixed(exc: ConfigError) -> ConfigError:
    return ConfigError([{**e, "field": f"{FIELD}.{e['field'].removeprefix('config.')}"} for e in exc.errors])


def check_warmup(name: str, config: dict[str, Any], overrides: dict[str, Any] | None) -> int:
    """Validate the warm-up run's config without writing anything; the number of runs it adds
    (0 or 1). Errors name warmup_run.<section>.<field>."""
    return len(warmup_plans(name, config, overrides))


def warmup_plans(name: str, config: dict[str, Any], overrides: dict[str, Any] | None) -> list:
    """The warm-up run as planned (none without overrides), for the preview's first row; errors as check_warmup."""
    if not overrides:
        return []
    try:
        return experiment_plan(name=name + SUFFIX, config=warmup_config(config, overrides))
    except ConfigError as exc:
        raise _prefixed(exc) from None


@transaction.atomic
def experiment_create_with_warmup(*, owner: User, warmup_run: dict[str, Any] | None = None, **spec: Any) -> Experiment:
    """experiment_create, with the warm-up run first when `warmup_run` is given."""
    if not warmup_run:
        return experiment_create(owner=owner, **spec)
    try:
        warm = experiment_create(
            owner=owner,
            name=spec["name"] + SUFFIX,
            config=warmup_config(spec["config"], warmup_run),
            project=spec.get("project"),
            priority=spec.get("priority", 0),
            tags=spec.get("tags"),
            notes=f"The warm-up run every run of experiment '{spec['name']}' starts from.",
        )
    except ConfigError as exc:
        raise _prefixed(exc) from None
    warm_run = Run.objects.get(experiment=warm)
    return experiment_create(owner=owner, **{**spec, "config": forked_config(spec["config"], warm_run.pk)})
