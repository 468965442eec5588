"""Cluster backends by name. Adding one means adding a module and a line here."""

from importlib import import_module

from orchestrator.cluster.backends.base import BackendError, ClusterBackend, JobSpec, JobState, JobStatus

BACKENDS = {
    "local": "orchestrator.cluster.backends.local.LocalBackend",
    "slurm": "orchestrator.cluster.backends.slurm.SlurmBackend",
}


def get_backend(name: str) -> ClusterBackend:
    try:
        dotted = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown cluster backend {name!r}; known: {', '.join(BACKENDS)}") from None
    module, _, cls = dotted.rpartition(".")
    return getattr(import_module(module), cls)()


__all__ = ["BackendError", "ClusterBackend", "JobSpec", "JobState", "JobStatus", "get_backend", "BACKENDS"]
