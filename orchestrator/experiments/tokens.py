"""Per-run ingestion tokens.

A token is HMAC(SECRET_KEY, run id, attempt, salt). The salt is stored when a submission is
claimed, so a submit task retried after a crash derives the same token the already-created job
received, instead of locking that job out. Only sha256(token) is stored for verification.

A token stops working RUN_TOKEN_GRACE after its run reached a final state (succeeded, failed,
cancelled; not `lost`, which may come back). The bound leaves room for a trainer's spool to
backfill after a dashboard outage: the final state is stamped when the orchestrator sees the job
end, which is after the dashboard is back, and a trainer restarted in the run directory (or its
exit flush) pushes what was never acknowledged within minutes; a day covers doing that by hand.
"""

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

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


RUN_TOKEN_GRACE = timedelta(hours=24)
EXPIRING_STATES = (Run.State.SUCCEEDED, Run.State.FAILED, Run.State.CANCELLED)


def run_token_expired(run: Run, now: datetime | None = None) -> bool:
    """Whether the run ended long enough ago that its token no longer writes to it."""
    if run.state not in EXPIRING_STATES or run.finished_at is None:
        return False
    grace = timedelta(seconds=getattr(settings, "OPL_RUN_TOKEN_GRACE_S", RUN_TOKEN_GRACE.total_seconds()))
    return (now or timezone.now()) - run.finished_at > grace
