"""The run page's alerts card: `{% run_alerts_card run %}`."""

from django import template

from orchestrator.alerts.selectors import run_alerts_data

register = template.Library()


@register.inclusion_tag("alerts/_run_alerts_card.html")
def run_alerts_card(run) -> dict:
    return run_alerts_data(run)
