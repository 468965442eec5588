"""YAML as people read it: a multi-line string (a prompt template) as a literal block (`|`),
line for line, instead of a quoted scalar with a blank line between its lines. It parses back
to the same string; PyYAML quotes the few strings a block cannot hold (trailing spaces)."""

from __future__ import annotations

from typing import Any

import yaml


class _ReadableDumper(yaml.SafeDumper):
    pass


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ReadableDumper.add_representer(str, _string)


def dump_yaml(data: Any, **options: Any) -> str:
    """yaml.safe_dump, keys in their order, multi-line strings as literal blocks."""
    return yaml.dump(data, Dumper=_ReadableDumper, sort_keys=False, allow_unicode=True, **options)
