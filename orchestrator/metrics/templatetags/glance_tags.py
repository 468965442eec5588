"""`{% heatmap_defaults runs page.fields as hxy %}`: the compare heatmap's default x and y fields."""

from django import template

from orchestrator.metrics.sweep_glance import heatmap_fields

register = template.Library()


@register.simple_tag
def heatmap_defaults(runs, fields) -> tuple[str, str]:
    return heatmap_fields(list(runs), list(fields))
