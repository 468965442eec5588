"""Revoking a logging token from the account's tokens page (the API does it at
DELETE /api/v1/sdk/tokens/<id>)."""

from django.contrib import messages
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from orchestrator.experiments.external_runs import logging_token_revoke


@require_POST
def logging_token_revoke_view(request, token_id: int):
    if not logging_token_revoke(user=request.user, token_id=token_id):
        messages.error(request, f"logging token {token_id}: not one of your tokens")
    return redirect("accounts-tokens")
