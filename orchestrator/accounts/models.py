import hashlib
import secrets

from django.conf import settings
from django.db import models


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ApiToken(models.Model):
    """A personal API token. Only its hash is stored; the token is shown once at creation. It
    stops working at `expires_at` (null: a token made before tokens expired), and a `read` token
    may only read (GET and HEAD)."""

    class Scope(models.TextChoices):
        WRITE = "write", "read and write"
        READ = "read", "read only"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, default="default")
    token_hash = models.CharField(max_length=64, unique=True)
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.WRITE)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.user} / {self.name}"

    def expired(self, now=None) -> bool:
        from django.utils import timezone

        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    @property
    def read_only(self) -> bool:
        return self.scope == self.Scope.READ

    @classmethod
    def new_token(cls) -> str:
        return "opl_" + secrets.token_urlsafe(32)
