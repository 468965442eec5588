"""Cluster backends by name. Adding one means adding a module and an entry in registry.py."""

from importlib import import_module

from django.conf import settings

from orchestrator.cluster.backends.base import (
    BackendError,
    Capabilities,
    ClusterBackend,
    JobSpec,
    JobState,
    JobStatus,
)
from orchestrator.cluster.backends.registry import REGISTRY, UnknownBackend, registration

BACKENDS = tuple(REGISTRY)


def get_backend(name: str) -> ClusterBackend:
    module, _, cls = registration(name).path.rpartition(".")
    return getattr(import_module(module), cls)()


def is_backend(name: str) -> bool:
    """A registered backend, i.e. not a run reported from outside (its backend is "external")."""
    return name in REGISTRY


def configured_backend() -> ClusterBackend:
    """The backend new runs go to (CLUSTER_BACKEND)."""
    return get_backend(settings.CLUSTER_BACKEND)


def reported_cluster() -> ClusterBackend | None:
    """The cluster of its own the health page reports on: the configured backend's, else one whose
    settings are given beside it (a lab that runs locally but has a cluster set up)."""
    names = [settings.CLUSTER_BACKEND, *(n for n in REGISTRY if n != settings.CLUSTER_BACKEND)]
    for name in names:
        if not registration(name).capabilities.own_cluster:
            continue
        backend = get_backend(name)
        if name == settings.CLUSTER_BACKEND or backend.is_configured():
            return backend
    return None


__all__ = [
    "BACKENDS",
    "BackendError",
    "Capabilities",
    "ClusterBackend",
    "JobSpec",
    "JobState",
    "JobStatus",
    "UnknownBackend",
    "configured_backend",
    "get_backend",
    "is_backend",
    "reported_cluster",
]
