"""The run page's alerts card: `{% run_alerts_card run can_write %}`."""

from django import template

from orchestrator.alerts.selectors import run_rules_context

register = template.Library()


@register.inclusion_tag("alerts/_run_alerts_card.html")
def run_alerts_card(run, can_edit=False) -> dict:
    return run_rules_context(run, can_edit=bool(can_edit))
