"""A launcher run's job: its argv and resources, from the launcher as it stands at submission.

The command always comes from the Launcher row (staff's), never from the run's config, which only
names the launcher and holds the typed values; those are checked again here, so a launcher that
was disabled or changed since the run was queued fails the run with a reason naming the field.
"""

from dataclasses import dataclass
from typing import Any

from orchestrator.launchers.definition import DefinitionError, Resources, build_argv, parse_params, resolve_paths
from orchestrator.launchers.models import Launcher


class LauncherUnavailable(ValueError):
    """The run's launcher cannot be run as it stands (gone, disabled, its values refused)."""


@dataclass(frozen=True)
class LauncherJob:
    name: str
    argv: list[str]
    resources: Resources
    container: str


def is_launcher_run(config: Any) -> bool:
    return isinstance(config, dict) and isinstance(config.get("launcher"), dict)


def launcher_job(
    config: dict[str, Any], *, python: str, run_dir: str, run_id: int, attempt: int, repo: str = ""
) -> LauncherJob:
    section = config["launcher"]
    name = str(section.get("name"))
    row = Launcher.objects.filter(name=name).first()
    if row is None:
        raise LauncherUnavailable(f"launcher: {name!r} no longer exists")
    if not row.enabled:
        raise LauncherUnavailable(f"launcher: {name!r} is disabled by staff")
    try:
        definition = row.definition()
    except DefinitionError as exc:  # saved around the checks (a raw SQL edit): refused, not run
        raise LauncherUnavailable(f"launcher {name!r} is invalid: {exc}") from None
    try:
        values = parse_params(definition, section.get("params") or {})
    except DefinitionError as exc:
        raise LauncherUnavailable(f"launcher {name!r} changed since this run was queued: {exc}") from None
    try:
        values = resolve_paths(definition, values, run_dir)
    except ValueError as exc:
        raise LauncherUnavailable(f"launcher {name!r}: {exc}") from None
    reserved = {
        "python": definition.python or python,
        "repo": repo,
        "run_dir": run_dir,
        "run_id": run_id,
        "attempt": attempt,
    }
    return LauncherJob(
        name=name,
        argv=build_argv(definition.command, {**values, **reserved}),
        resources=Resources.model_validate(section.get("resources") or {}),
        container=definition.container,
    )
