"""Template tags of the statistics section."""

from django import template

from orchestrator.studies.table import estimates_text

register = template.Library()


@register.simple_tag
def estimates(*labels_and_numbers) -> str:
    """{% estimates "on-policy" n.on_policy "m2po" n.stale_m2po %}: see table.estimates_text."""
    pairs = zip(labels_and_numbers[::2], labels_and_numbers[1::2], strict=True)
    return estimates_text(*pairs)


@register.simple_tag
def difference(label, numbers) -> str:
    """{% difference "on-policy − stale clip" n.difference %}: "label +0.050 [+0.048, +0.052] (95%,
    paired)", or "" without an interval (the verdict's reason says why)."""
    if not numbers or numbers.get("low") is None or numbers["low"] != numbers["low"]:
        return ""
    level = f"{numbers.get('confidence', 0.95):.0%}"
    how = "paired" if numbers.get("paired") else "Welch"
    return f"{label} {numbers['mean']:+.3f} [{numbers['low']:+.3f}, {numbers['high']:+.3f}] ({level} t, {how})"
