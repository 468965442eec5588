"""A rule as the browser posts it (strings) turned into the values alert_rule_set takes.

Only the text-to-type step lives here; the bounds are the API's own (services.rule_checked), so the
form and the API accept and refuse the same rules with the same messages."""

from __future__ import annotations

import math

from orchestrator.alerts.services import RuleError


def rule_values(post) -> dict:
    """{kind, enabled, threshold, window_s, action} from a form; an empty number is the default."""
    return {
        "kind": post.get("kind", ""),
        "enabled": post.get("enabled") in ("on", "true", "1"),
        "threshold": _number(post, "threshold", float),
        "window_s": _number(post, "window_s", int),
        "action": post.get("action", "notify"),
    }


def _number(post, field: str, kind: type):
    text = (post.get(field) or "").strip()
    if not text:
        return None
    try:
        value = kind(text)
    except ValueError:
        what = "a whole number of seconds" if kind is int else "a number"
        raise RuleError(field, f"must be {what}, got {text[:40]!r}") from None
    if kind is float and not math.isfinite(value):
        raise RuleError(field, f"must be a finite number under 1e12 in size, got {text[:40]!r}")
    return value
