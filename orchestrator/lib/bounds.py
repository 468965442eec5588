"""Limits on what a user may send, checked at the edge so that nothing oversized, too deep, or
outside a database column's range reaches a query or a save. Each check names the field."""

from __future__ import annotations

import math
import re
from typing import Any

INT32 = (-(2**31), 2**31 - 1)  # IntegerField on PostgreSQL
INT64 = (-(2**63), 2**63 - 1)  # BigIntegerField / bigint ids
MAX_DEPTH = 32  # JSON and YAML nesting; a full experiment spec needs about 6
MAX_NOTES = 10_000  # characters of an experiment's or a run's notes
MAX_DESCRIPTION = 2_000
MAX_TAGS = 20  # per run (and per experiment request)
MAX_TAG_LENGTH = 50
MAX_MEMBERS_PER_REQUEST = 100
MAX_YAML_BYTES = 256 * 1024  # an uploaded or pasted experiment file
MAX_STRING = 100_000  # any one string value inside a config
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*\Z")  # names used in URLs and headers
ID = re.compile(
    r"[0-9]{1,18}\Z"
)  # ASCII digits only ("²".isdigit() is True), within bigint; \Z: `$` allows a final newline


class BoundsError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message

    def as_errors(self) -> list[dict[str, str]]:
        return [{"field": self.field, "message": self.message}]


def parse_id(text: str | None) -> int | None:
    """A database id from a query parameter; None unless it is plain ASCII digits in range."""
    if text is None or not ID.match(text):
        return None
    return int(text)


def parse_priority(text: str | None) -> int | None:
    """A priority from a form: an ASCII whole number within the 32-bit column, else None."""
    text = (text or "").strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,10}", text):
        return None
    value = int(text)
    return value if INT32[0] <= value <= INT32[1] else None


def check_values(value: Any, field: str, *, depth: int = 0) -> None:
    """Every number finite and within 64 bits, nesting at most MAX_DEPTH, strings bounded."""
    if depth > MAX_DEPTH:
        raise BoundsError(field, f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        if not INT64[0] <= value <= INT64[1]:
            raise BoundsError(field, "integer out of range (at most 64 bits)")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise BoundsError(field, "must be a finite number (not NaN or infinity)")
    elif isinstance(value, str):
        if len(value) > MAX_STRING:
            raise BoundsError(field, f"at most {MAX_STRING} characters")
        if "\x00" in value:
            raise BoundsError(field, "contains a NUL character")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or len(key) > 200:
                raise BoundsError(field or "(file)", f"keys must be short strings, got {str(key)[:40]!r}")
            check_values(item, f"{field}.{key}" if field else key, depth=depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_values(item, f"{field}.{i}" if field else str(i), depth=depth + 1)
    else:  # a YAML date, set or binary: nothing the JSON columns or the trainer take
        raise BoundsError(field or "(file)", f"unsupported value of type {type(value).__name__}")


def json_problem(value: Any) -> str | None:
    """Why a parsed JSON document is refused (too deep, or a NUL character, which no PostgreSQL
    text or jsonb value can hold), without recursion: a hostile document must not exhaust the stack."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"nested too deeply (at most {MAX_DEPTH} levels)"
        if isinstance(item, str):
            if "\x00" in item:
                return "contains a NUL character (\\u0000)"
        elif isinstance(item, dict):
            for key, sub in item.items():
                if "\x00" in key:
                    return "contains a NUL character (\\u0000)"
                stack.append((sub, depth + 1))
        elif isinstance(item, list):
            stack.extend((sub, depth + 1) for sub in item)
    return None


def text_problem(params) -> tuple[str, str] | None:
    """(name, why) of the first query or form parameter holding a NUL character."""
    for name, values in params.lists():
        if "\x00" in name or any("\x00" in v for v in values):
            return name.replace("\x00", ""), "contains a NUL character"
    return None


def safe_filename(name: str, default: str = "download") -> str:
    """A file name for Content-Disposition: only characters that need no quoting."""
    clean = re.sub(r"[^A-Za-z0-9_.\-+]", "_", name or "")[:150].lstrip(".")
    return clean or default
