"""Per-run ingestion tokens.

A token is HMAC(SECRET_KEY, run id, attempt, salt). The salt is stored when a submission is
claimed, so a submit task retried after a crash derives the same token the already-created job
received, instead of locking that job out. Only sha256(token) is stored for verification.

A token writes only while the run's owner may still write into the run's project: an active user
who is an owner or member there (or staff). Removing a member, making them a viewer or
deactivating them stops their runs' tokens at once, whoever holds the tokens.

A token stops working OPL_RUN_TOKEN_GRACE_S (5 minutes) after its run succeeded or failed (not
`lost`, which may come back): room for the trainer's last flush, which may land just after the
final state is stamped, and no more, so a token that leaked with a run's folder is not a standing
way into the project. A run logged from outside (the `opl` SDK) that was cancelled stops at once:
no job of ours runs it, so cancelling is how its owner or the project's owners stop what it
writes. A cluster run that was cancelled keeps the grace: its job is stopped, and its trainer
flushes on the way out. What the trainer could not deliver in time stays in its run folder
(metrics.rejected.jsonl), and `manage.py resend_rejected` stores it.
"""

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from orchestrator.experiments.models import Membership, Run


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


RUN_TOKEN_GRACE = timedelta(minutes=5)
EXPIRING_STATES = (Run.State.SUCCEEDED, Run.State.FAILED, Run.State.CANCELLED)


def run_token_grace() -> timedelta:
    return timedelta(seconds=getattr(settings, "OPL_RUN_TOKEN_GRACE_S", RUN_TOKEN_GRACE.total_seconds()))


def run_token_expired(run: Run, now: datetime | None = None) -> bool:
    """Whether the run ended long enough ago that its token no longer writes to it."""
    if run.state not in EXPIRING_STATES or run.finished_at is None:
        return False
    if run.state == Run.State.CANCELLED and run.backend == Run.EXTERNAL_BACKEND:
        return True
    return (now or timezone.now()) - run.finished_at > run_token_grace()


def run_token_expiry(run: Run) -> str:
    """Why an expired token no longer writes (told to the token's holder, who knows the run)."""
    if run.state == Run.State.CANCELLED and run.backend == Run.EXTERNAL_BACKEND:
        return f"run {run.pk} was cancelled at {run.finished_at.isoformat()}: its token no longer writes"
    return f"run {run.pk} ended at {run.finished_at.isoformat()}: its token has expired"


def run_token_writes(run: Run, token: str | None) -> bool:
    """Whether `token` is this run's and the run's owner may still write into its project (the
    expiry after the run ended is run_token_expired's, which may say why)."""
    return run_token_matches(run, token) and owner_still_writes(run)


def owner_still_writes(run: Run) -> bool:
    owner = run.owner
    if not owner.is_active:
        return False
    if owner.is_staff:
        return True
    return Membership.objects.filter(
        project_id=run.experiment.project_id, user_id=owner.pk, role__in=Membership.WRITERS
    ).exists()


def run_not_found(run_id: int) -> str:
    """The one answer for a run that does not exist and for a token that cannot write to it, so
    that neither a guessed id nor a wrong token learns which runs exist."""
    return f"run {run_id} does not exist, or this token cannot write to it"
