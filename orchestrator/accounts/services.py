from django.contrib.auth.models import User
from django.utils import timezone

from orchestrator.accounts.models import ApiToken, hash_token


def api_token_create(*, user: User, name: str = "default") -> str:
    """Create a personal token and return it in clear text (the only time it is visible)."""
    token = ApiToken.new_token()
    ApiToken.objects.create(user=user, name=name, token_hash=hash_token(token))
    return token


def user_for_api_token(token: str) -> User | None:
    api_token = ApiToken.objects.select_related("user").filter(token_hash=hash_token(token)).first()
    if api_token is None or not api_token.user.is_active:
        return None
    ApiToken.objects.filter(pk=api_token.pk).update(last_used_at=timezone.now())
    return api_token.user


def api_token_delete(*, user: User, token_id: int) -> bool:
    """Revoke one of the user's own tokens; False if it is not theirs or does not exist."""
    deleted, _ = ApiToken.objects.filter(pk=token_id, user=user).delete()
    return bool(deleted)
