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
