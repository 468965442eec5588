"""Personal API tokens: created with a lifetime and a scope, looked up by their hash, revoked."""

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from orchestrator.accounts.models import ApiToken, hash_token

DEFAULT_DAYS = 90
DAY_CHOICES = (7, 30, 90, 365)  # what the tokens page offers (up to OPL_API_TOKEN_MAX_DAYS)


class TokenError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def max_days() -> int:
    return getattr(settings, "OPL_API_TOKEN_MAX_DAYS", 365)


def api_token_create(
    *, user: User, name: str = "default", days: int = DEFAULT_DAYS, scope: str = ApiToken.Scope.WRITE
) -> str:
    """Create a personal token valid for `days` and return it in clear text (the only time it is
    visible); TokenError names the bad field."""
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= max_days():
        raise TokenError("days", f"a whole number of days from 1 to {max_days()}, got {days!r}")
    if scope not in ApiToken.Scope.values:
        raise TokenError("scope", f"one of {', '.join(ApiToken.Scope.values)}, got {scope!r}")
    token = ApiToken.new_token()
    ApiToken.objects.create(
        user=user,
        name=name,
        token_hash=hash_token(token),
        scope=scope,
        expires_at=timezone.now() + timedelta(days=days),
    )
    return token


def api_token_lookup(token: str) -> ApiToken | None:
    """The token's row (with its user) if it exists, belongs to an active user and has not
    expired; its last use is noted."""
    api_token = ApiToken.objects.select_related("user").filter(token_hash=hash_token(token)).first()
    if api_token is None or not api_token.user.is_active or api_token.expired():
        return None
    ApiToken.objects.filter(pk=api_token.pk).update(last_used_at=timezone.now())
    return api_token


def user_for_api_token(token: str) -> User | None:
    api_token = api_token_lookup(token)
    return api_token.user if api_token else None


def api_token_delete(*, user: User, token_id: int) -> bool:
    """Revoke one of the user's own tokens; False if it is not theirs or does not exist."""
    deleted, _ = ApiToken.objects.filter(pk=token_id, user=user).delete()
    return bool(deleted)
