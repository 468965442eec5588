"""The personal API tokens page: list, create (shown once, with a lifetime and a scope), revoke."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from orchestrator.accounts.models import ApiToken
from orchestrator.accounts.services import (
    DAY_CHOICES,
    DEFAULT_DAYS,
    TokenError,
    api_token_create,
    api_token_delete,
    max_days,
)


def tokens(request):
    new_token, error, status = None, None, 200
    if request.method == "POST":
        name = (request.POST.get("name") or "").strip()[:100] or "default"
        raw_days = request.POST.get("days", str(DEFAULT_DAYS))
        try:
            days = int(raw_days) if raw_days.isdigit() else raw_days[:20]
            new_token = api_token_create(
                user=request.user, name=name, days=days, scope=request.POST.get("scope", ApiToken.Scope.WRITE)
            )
        except TokenError as exc:
            error, status = exc, 400
    return render(
        request,
        "accounts/tokens.html",
        {
            "tokens": ApiToken.objects.filter(user=request.user).order_by("-created_at"),
            "new_token": new_token,
            "error": error,
            "day_choices": [d for d in DAY_CHOICES if d <= max_days()] or [max_days()],
            "default_days": DEFAULT_DAYS,
            "scopes": ApiToken.Scope.choices,
        },
        status=status,
    )


@require_POST
def token_delete(request, token_id: int):
    if not api_token_delete(user=request.user, token_id=token_id):
        messages.error(request, f"token {token_id}: not one of your tokens")
    return redirect("accounts-tokens")
