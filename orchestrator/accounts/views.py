"""The personal API tokens page: list, create (shown once), revoke."""
from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from orchestrator.accounts.models import ApiToken
from orchestrator.accounts.services import api_token_create, api_token_delete


def tokens(request):
    new_token = None
    if request.method == "POST":
        name = (request.POST.get("name") or "").strip()[:100] or "default"
        new_token = api_token_create(user=request.user, name=name)
    return render(request, "accounts/tokens.html", {
        "tokens": ApiToken.objects.filter(user=request.user).order_by("-created_at"),
        "new_token": new_token,
    })


@require_POST
def token_delete(request, token_id: int):
    if not api_token_delete(user=request.user, token_id=token_id):
        messages.error(request, f"token {token_id}: not one of your tokens")
    return redirect("accounts-tokens")
