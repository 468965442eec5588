"""Writes on launchers, and runs created from them.

A launcher run is an experiment of one run whose config is {"launcher": {name, params,
resources}}: it waits in the same queue, under the same quotas, as any other run, and
cluster/jobspec.py turns it into a job through launchers/jobs.py.
"""

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from orchestrator.experiments.limits import profile_gpus
from orchestrator.experiments.models import Experiment, Run
from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.schemas import NAME_RE
from orchestrator.experiments.services import project_for, run_set_tags
from orchestrator.launchers.definition import Definition, DefinitionError, parse_definition, parse_params
from orchestrator.launchers.models import Launcher
from orchestrator.lib.bounds import INT32, MAX_NOTES


def launcher_upsert(*, by: User | None, data: dict[str, Any]) -> tuple[Launcher, bool]:
    """Create or replace the launcher named data["name"] from a checked definition; (row, created).
    `by` must be staff: a launcher is code the cluster's service account runs. None is the
    operator at the command line (load_launchers)."""
    if by is not None and not by.is_staff:
        raise PermissionDenied("only staff define launchers: a launcher is code the service account runs")
    definition = parse_definition(data)  # raises DefinitionError naming each bad field
    fields = definition.model_dump(mode="json", exclude={"name"})
    fields["parameters"] = [  # a list: jsonb would sort an object's keys, and the form shows them in order
        {"name": name, **param.model_dump(mode="json", exclude_defaults=True)}
        for name, param in definition.parameters.items()
    ]
    launcher, created = Launcher.objects.update_or_create(name=definition.name, defaults=fields)
    if created and by is not None:
        Launcher.objects.filter(pk=launcher.pk).update(created_by=by)
        launcher.created_by = by
    return launcher, created


def launcher_config(definition: Definition, values: dict[str, Any]) -> dict[str, Any]:
    """What a launcher run stores as its config: the launcher, the typed values, the resources."""
    return {
        "launcher": {
            "name": definition.name,
            "params": values,
            "resources": definition.resources.model_dump(mode="json"),
        }
    }


def enabled_launcher(name: str) -> Definition:
    row = Launcher.objects.filter(name=name, enabled=True).first() if isinstance(name, str) else None
    if row is None:
        known = ", ".join(Launcher.objects.filter(enabled=True).values_list("name", flat=True)) or "none"
        raise ConfigError(
            [{"field": "launcher", "message": f"no enabled launcher named {str(name)[:60]!r} (enabled: {known})"}]
        )
    try:
        return row.definition()
    except DefinitionError as exc:  # a row saved around the checks (a raw SQL edit): refused, not run
        raise ConfigError([{"field": "launcher", "message": f"{name}'s definition is invalid: {exc}"}]) from None


@transaction.atomic
def launcher_run_create(
    *,
    owner: User,
    launcher: str,
    params: dict[str, Any],
    name: str = "",
    project: str | None = None,
    priority: int = 0,
    tags: list[str] | None = None,
    notes: str = "",
) -> Run:
    """Check the values against the launcher, then create an experiment of one queued run."""
    definition = enabled_launcher(launcher)
    try:
        values = parse_params(definition, params)
    except DefinitionError as exc:
        raise ConfigError(exc.errors) from None
    name = name or definition.name
    if not NAME_RE.match(name) or len(name) > 200:
        raise ConfigError([{"field": "name", "message": "letters, digits, '_', '.' and '-', at most 200"}])
    if not INT32[0] <= priority <= INT32[1]:
        raise ConfigError([{"field": "priority", "message": "must fit in 32 bits"}])
    if len(notes) > MAX_NOTES or "\x00" in notes:
        raise ConfigError([{"field": "notes", "message": f"at most {MAX_NOTES} characters, no NUL"}])
    config = launcher_config(definition, values)
    experiment = Experiment.objects.create(
        name=name, project=project_for(project, owner), owner=owner, base_config=config, priority=priority, notes=notes
    )
    fixed = profile_gpus()  # a Slurm profile that fixes the GPU count gives every job that many
    gpus = fixed * definition.resources.nodes if fixed is not None else definition.resources.total_gpus
    run = Run.objects.create(
        experiment=experiment,
        owner=owner,
        name=name,
        config=config,
        priority=priority,
        gpus=gpus,
        queued_at=timezone.now(),
    )
    if tags:
        run_set_tags(run=run, tags=tags)
    return run
