from typing import Any

from orchestrator.launchers.models import Launcher


def enabled_launchers() -> list[Launcher]:
    return list(Launcher.objects.filter(enabled=True).order_by("name"))


def launcher_to_dict(launcher: Launcher) -> dict[str, Any]:
    """What a user sees of a launcher: enough to fill its parameters and know what it asks for."""
    definition = launcher.definition()
    return {
        "name": launcher.name,
        "description": launcher.description,
        "command": launcher.command,
        "parameters": [
            {"name": name, **param.model_dump(mode="json", exclude_defaults=True)}
            for name, param in definition.parameters.items()
        ],
        "resources": definition.resources.model_dump(mode="json"),
    }
