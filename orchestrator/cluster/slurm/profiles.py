"""Finding the cluster profile a run asks for."""

from __future__ import annotations

from .config import setting
from .jobscript import SlurmProfile


def default_profile() -> SlurmProfile:
    """The profile used when a run names none and no admin-edited one exists, from settings."""
    lines = setting("SLURM_SETUP_LINES", "")
    if isinstance(lines, str):
        lines = [line for line in lines.splitlines() if line.strip()]
    return SlurmProfile(
        name="default",
        partition=str(setting("SLURM_PARTITION", "")),
        account=str(setting("SLURM_ACCOUNT", "")),
        qos=str(setting("SLURM_QOS", "")),
        setup_lines=list(lines),
    )


def load_profile(name: str) -> SlurmProfile:
    """The admin-edited ClusterProfile of that name (or the default one, or the one from
    settings when there is none)."""
    try:
        from orchestrator.cluster.models import ClusterProfile
    except ImportError:
        ClusterProfile = None
    if ClusterProfile is not None:
        qs = ClusterProfile.objects.filter(name=name) if name else ClusterProfile.objects.filter(is_default=True)
        row = qs.first()
        if row is not None:
            return row.to_slurm_profile()
        if name:
            raise LookupError(f"profile: no cluster profile named {name!r}")
    return default_profile()
