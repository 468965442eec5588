"""Credentials for slurmrestd: a JWT from settings, or one minted from the cluster's
HS256 key file (AuthAltParameters=jwt_key=...), renewed before it expires.

Tokens are secrets: `SlurmCredentials.__repr__` hides them, and nothing here logs them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from pathlib import Path

# An expired token looks like a server error (22.05 answers 500), so renew well before.
RENEW_BEFORE_S = 300


def _b64(raw: bytes) -> bytes:
    return base64.urlsafe_b64encode(raw).rstrip(b"=")


def mint_token(key: bytes, username: str, lifespan_s: int, now: float | None = None) -> str:
    """An HS256 token as `scontrol token` makes it: claims exp, iat and sun (the user)."""
    issued = int(now if now is not None else time.time())
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = _b64(
        json.dumps({"exp": issued + lifespan_s, "iat": issued, "sun": username}, separators=(",", ":")).encode()
    )
    signature = _b64(hmac.new(key, header + b"." + claims, hashlib.sha256).digest())
    return (header + b"." + claims + b"." + signature).decode()


def token_expiry(token: str) -> int | None:
    """The exp claim of a JWT (not verified: only to know when to renew), or None."""
    try:
        claims = token.split(".")[1]
        return int(json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["exp"])
    except (IndexError, ValueError, KeyError, TypeError):
        return None


class SlurmCredentials:
    """Gives the headers for each request. Exactly one of `token` or `key_file` is used;
    with a key file a fresh token is minted whenever the current one nears expiry."""

    def __init__(self, user: str, *, token: str = "", key_file: str | Path | None = None, lifespan_s: int = 3600):
        if not user:
            raise ValueError("SLURM_REST_USER: the user name sent to slurmrestd is required")
        if not token and not key_file:
            raise ValueError("SLURM_JWT or SLURM_JWT_KEY_FILE: one of them is required")
        self.user = user
        self._token = token
        self._key_file = Path(key_file) if key_file and not token else None
        self._lifespan_s = lifespan_s
        self._expires_at = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        source = "key file" if self._key_file else "static token"
        return f"SlurmCredentials(user={self.user!r}, {source}, token=<hidden>)"

    def _current_token(self) -> str:
        if self._key_file is None:
            return self._token
        with self._lock:
            if not self._token or time.time() > self._expires_at - RENEW_BEFORE_S:
                key = self._key_file.read_bytes()
                self._token = mint_token(key, self.user, self._lifespan_s)
                self._expires_at = int(time.time()) + self._lifespan_s
            return self._token

    def headers(self) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self._current_token()}
