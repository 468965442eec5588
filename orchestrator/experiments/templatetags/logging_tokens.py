"""The logging tokens card on the account's tokens page: the accounts app renders the page, and
the tokens are this app's (accounts, the bottom layer, does not import it)."""

from django import template

from orchestrator.experiments.external_runs import logging_tokens_of

register = template.Library()


@register.inclusion_tag("accounts/_logging_tokens.html", takes_context=True)
def logging_tokens_card(context):
    return {"logging_tokens": list(logging_tokens_of(context["request"].user)), "csrf_token": context["csrf_token"]}
