"""Queue limits and the GPU count of a run.

The limits are read from settings (the lead wires them to the environment in settings.py); the
defaults here apply when a setting is absent. None or 0 means "no limit".
"""

from collections.abc import Callable
from typing import Any

from django.conf import settings

DEFAULTS = {
    "OPL_MAX_SWEEP_RUNS": 5000,  # a sweep expanding to more runs is refused
    "OPL_USER_MAX_ACTIVE_RUNS": 0,  # submitted/pending/running runs per user
    "OPL_USER_MAX_GPUS": 0,  # GPUs held by a user's active runs
    "OPL_PROJECT_MAX_ACTIVE_RUNS": 0,  # per project, unless the project sets its own
    "OPL_PROJECT_MAX_GPUS": 0,
    "OPL_MAX_GPUS": 0,  # GPUs held by all active runs together
}


def limit(name: str) -> int:
    """The configured limit, 0 meaning none."""
    return int(getattr(settings, name, DEFAULTS[name]) or 0)


def run_gpus(config: dict[str, Any], profile_gpus: int | None = None) -> int:
    """GPUs a run holds while active, over all its nodes: the cluster profile's count per node when
    it fixes one (the job asks for exactly that), else resources.gpus_per_node from the run's
    (validated) config.

    train.device cpu needs none. cuda needs them. 'auto' runs on GPUs when the node has them, so it
    counts them, except for the CPU demo model ('tiny' with the hf engine), which never needs one.
    """
    resources = config.get("resources") or {}
    nodes = int(resources.get("nodes", 1))
    if profile_gpus is not None:
        return profile_gpus * nodes
    device = config.get("train", {}).get("device", "auto")
    if device == "cpu":
        return 0
    per_node = int(resources.get("gpus_per_node", 1))
    if device == "cuda":
        return per_node * nodes
    tiny = config.get("model", {}).get("name") == "tiny"
    return 0 if tiny and config.get("rollout", {}).get("engine", "hf") == "hf" else per_node * nodes


_fixed_gpus: list[Callable[[], int | None]] = []


def fixed_gpus_from(source: Callable[[], int | None]) -> None:
    """Where profile_gpus asks: the cluster app registers its configured backend (cluster/apps.py)."""
    _fixed_gpus[:] = [source]


def profile_gpus() -> int | None:
    """The GPU count the cluster gives every job whatever it asks, if it fixes one (a cluster
    profile may)."""
    return _fixed_gpus[0]() if _fixed_gpus else None
