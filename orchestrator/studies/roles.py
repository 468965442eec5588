"""Roles for runs the bundled trainer did not run: statistics and verdicts group runs by the swept
staleness and objective (a cell's runs are its seeds). A run logged with the `opl` SDK or imported
has no sweep values, only the config it logged; a role mapping names the config field that plays
each role, e.g. ?role.staleness=actor_rollout_ref.rollout.staleness&role.objective=algorithm.loss_fn
&role.seed=trainer.seed, so an imported verl sweep is judged like a bundled one."""

from __future__ import annotations

import re

from orchestrator.experiments.models import Run
from orchestrator.studies.table import OBJECTIVE_PATH, STALENESS_PATHS

ROLES = {"staleness": STALENESS_PATHS[0], "objective": OBJECTIVE_PATH, "seed": None}
PATH_RE = re.compile(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*\Z")
MISSING = object()


def roles_from(params) -> tuple[dict[str, str], list[dict[str, str]]]:
    """{role: config path} from the parameters role.<role>, and the errors naming each bad one."""
    roles, errors = {}, []
    for role in ROLES:
        path = (params.get(f"role.{role}") or "").strip()
        if not path:
            continue
        if len(path) > 200 or not PATH_RE.match(path):
            errors.append({"field": f"role.{role}", "message": "a dotted config path such as trainer.seed"})
        else:
            roles[role] = path
    return roles, errors


def config_value(config, path: str):
    for part in path.split("."):
        if not isinstance(config, dict) or part not in config:
            return MISSING
        config = config[part]
    return config


def apply_roles(runs: list[Run], params) -> list[dict[str, str]]:
    """Give each run (in memory only) the sweep values and seed its config holds under the mapped
    paths; the errors name a role whose path no run's config has."""
    roles, errors = roles_from(params)
    if not roles:
        return errors
    configs = dict(Run.objects.filter(pk__in=[r.pk for r in runs]).values_list("pk", "config"))
    for role, path in roles.items():
        values = {r.pk: config_value(configs.get(r.pk), path) for r in runs}
        if all(v is MISSING for v in values.values()):
            errors.append({"field": f"role.{role}", "message": f"no run of this experiment logged {path!r}"})
            continue
        for run in runs:
            value = values[run.pk]
            if value is MISSING or isinstance(value, (dict, list)):
                continue
            if role == "seed":
                run.seed = value if isinstance(value, int) else run.seed
            else:
                run.sweep_values = {**(run.sweep_values or {}), ROLES[role]: value}
    return errors
