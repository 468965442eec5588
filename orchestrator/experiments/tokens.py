"""Per-run ingestion tokens.

A token is HMAC(SECRET_KEY, run id, attempt, salt). The salt is stored when a submission is
claimed, so a submit task retried after a crash derives the same token the already-created job
received, instead of locking that job out. Only sha256(token) is stored for verification.
"""
import hashlib
import hmac
import secrets

from django.conf import settings

from orchestrator.experiments.models import Run


def new_salt() -> str:
    return secrets.token_hex(16)


def derive_token(run_id: int, attempt: int, salt: str) -> str:
    msg = f"opl-run:{run_id}:attempt:{attempt}:{salt}".encode()
    return "oplrun_" + hmac.new(settings.SECRET_KEY.encode(), msg, hashlib.sha256).hexdigest()


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def run_token_matches(run: Run, token: str | None) -> bool:
    if not token or not run.token_hash:
        return False
    return hmac.compare_digest(run.token_hash, token_hash(token))
