"""The registered backends: where each lives, what it can answer and what it needs set.

Plain data with no Django imports, so settings.py can check CLUSTER_BACKEND against it at startup.
Adding a backend means adding its module and one entry here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.cluster.backends.base import Capabilities


@dataclass(frozen=True)
class Registration:
    path: str  # module.Class
    capabilities: Capabilities
    # settings the backend cannot run without; a tuple of names is satisfied by any one of them
    required_settings: tuple[tuple[str, ...], ...] = ()


REGISTRY: dict[str, Registration] = {
    "local": Registration(
        "orchestrator.cluster.backends.local.LocalBackend",
        Capabilities(this_machine=True),
    ),
    "slurm": Registration(
        "orchestrator.cluster.backends.slurm.SlurmBackend",
        Capabilities(profiles=True, own_cluster=True),
        required_settings=(("SLURM_REST_URL",), ("SLURM_REST_USER",), ("SLURM_JWT", "SLURM_JWT_KEY_FILE")),
    ),
}


DEFAULT_BACKEND = "local"


class UnknownBackend(ValueError):
    pass


def registration(name: str, setting: str = "backend") -> Registration:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownBackend(
            f"{setting}: unknown cluster backend {name!r}; known backends: {', '.join(REGISTRY)}"
        ) from None


def name_problem(name: str) -> str:
    """Why CLUSTER_BACKEND cannot name this backend, or "" when it can."""
    try:
        registration(name, "CLUSTER_BACKEND")
    except UnknownBackend as exc:
        return str(exc)
    return ""


def settings_problem(values: Mapping[str, object]) -> str:
    """Why these settings cannot start the dashboard (CLUSTER_BACKEND unknown, or a setting its
    backend needs left empty), or "" when they can."""
    name = str(values.get("CLUSTER_BACKEND", ""))
    if problem := name_problem(name):
        return problem
    needed = REGISTRY[name].required_settings
    missing = [" or ".join(names) for names in needed if not any(values.get(n) for n in names)]
    return f"CLUSTER_BACKEND={name} needs {', '.join(missing)}" if missing else ""
