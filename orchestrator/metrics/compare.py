"""Comparing runs: which config fields differ, for the diff table, grouping and heatmaps."""
from typing import Any


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay values."""
    if not isinstance(config, dict):
        return {prefix: config} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


def differing_fields(configs: list[dict[str, Any]]) -> list[str]:
    """Dotted fields whose value is not the same in every config (missing counts as different)."""
    flat = [flatten(c) for c in configs]
    fields = sorted({f for c in flat for f in c})
    missing = object()
    return [f for f in fields if len({repr(c.get(f, missing)) for c in flat}) > 1]


def fork_steps(runs) -> tuple[dict[int, int], dict[int, int]]:
    """For drawing forks from their parent's step: ({fork id: the parent's update it starts from}
    for every compared run forked at a known step, {parent id: the latest such update} for the
    parents among the compared runs, where their curve may stop)."""
    offsets = {r.pk: r.parent_step for r in runs if r.parent_id is not None and r.parent_step is not None}
    compared = {r.pk for r in runs}
    clip: dict[int, int] = {}
    for r in runs:
        if r.pk in offsets and r.parent_id in compared:
            clip[r.parent_id] = max(clip.get(r.parent_id, 0), offsets[r.pk])
    return offsets, clip
