"""Template tags of the statistics section."""

from django import template

from orchestrator.studies.table import estimates_text

register = template.Library()


@register.simple_tag
def estimates(*labels_and_numbers) -> str:
    """{% estimates "on-policy" n.on_policy "m2po" n.stale_m2po %}: see table.estimates_text."""
    pairs = zip(labels_and_numbers[::2], labels_and_numbers[1::2], strict=True)
    return estimates_text(*pairs)
