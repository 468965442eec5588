"""Runs logged from outside: a trainer that is not ours logs through the `opl` SDK (client/opl),
or `opl import` uploads an old history. Such a run is born running, with no job of ours behind
it; it ends when the client says so (`finish(exit_code=...)`) or when its heartbeats stop.

Writes go through the run's own ingestion token (experiments/tokens.py), handed back when the run
is opened, so a logging token (LoggingToken) can write to the runs it opened and to nothing else.
"""

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from orchestrator.accounts.models import ApiToken
from orchestrator.accounts.services import TokenError, max_days
from orchestrator.experiments.access import check_can_add_experiments
from orchestrator.experiments.models import Experiment, ExternalRun, LoggingToken, Run, Tag
from orchestrator.experiments.services import project_for, run_transition
from orchestrator.experiments.tokens import derive_token, new_salt, token_hash

DEFAULT_DAYS = 365  # a logging token lives on a cluster for a while: the cap still applies
BACKEND = Run.EXTERNAL_BACKEND  # no cluster backend has that name: no sync polls these runs
S = Run.State


class ExternalRunError(Exception):
    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(f"{field}: {message}")
        self.field, self.message, self.status = field, message, status


# --- logging tokens -----------------------------------------------------------------------------


def logging_token_create(
    *, user: User, name: str = "default", days: int | None = None, made_with: ApiToken | None = None
) -> tuple[LoggingToken, str]:
    """A new logging token; the token itself is returned once and only its hash is kept.

    Its lifetime is capped like a personal token's (OPL_API_TOKEN_MAX_DAYS; TokenError names
    `days`), and one made with a personal token (`made_with`) ends no later than that token and is
    deleted when that token is revoked: a credential made with another never outlives it. A
    deactivated user's logging tokens stop too (logging_token_lookup)."""
    days = min(DEFAULT_DAYS, max_days()) if days is None else days
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= max_days():
        raise TokenError(
            "days", f"a whole number of days from 1 to {max_days()} (OPL_API_TOKEN_MAX_DAYS), got {days!r}"
        )
    token = LoggingToken.PREFIX + secrets.token_urlsafe(32)
    expires = timezone.now() + timedelta(days=days)
    if made_with is not None and made_with.expires_at is not None:
        expires = min(expires, made_with.expires_at)
    row = LoggingToken.objects.create(
        user=user, name=name, token_hash=_hash(token), expires_at=expires, made_with=made_with
    )
    return row, token


def logging_tokens_of(user: User):
    """The user's logging tokens, newest first, with the personal token each was made with."""
    return LoggingToken.objects.filter(user=user).select_related("made_with").order_by("-created_at", "-pk")


def logging_token_revoke(*, user: User, token_id: int) -> bool:
    """Delete one of the user's own logging tokens; False if it is not theirs or does not exist.
    The runs it opened keep their own tokens until they end: cancel one to stop it at once."""
    deleted, _ = LoggingToken.objects.filter(pk=token_id, user=user).delete()
    return bool(deleted)


def logging_token_lookup(token: str) -> LoggingToken | None:
    """The token's row (with its user) if it is a live logging token of an active user."""
    if not token.startswith(LoggingToken.PREFIX):
        return None
    row = LoggingToken.objects.select_related("user").filter(token_hash=_hash(token)).first()
    if row is None or not row.user.is_active or (row.expires_at is not None and row.expires_at <= timezone.now()):
        return None
    LoggingToken.objects.filter(pk=row.pk).update(last_used_at=timezone.now())
    return row


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# --- runs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Opened:
    run: Run
    token: str
    created: bool


def external_run_open(
    *,
    user: User,
    client_id: str,
    name: str,
    project: str | None = None,
    group: str | None = None,
    config: dict[str, Any] | None = None,
    tags: list[str] | None = None,
    notes: str = "",
    heartbeat_timeout_s: int = 600,
    logging_token: LoggingToken | None = None,
) -> Opened:
    """The user's run opened with `client_id`: created (running) the first time, the same run after.
    Client ids are each user's own: another user's id opens (creates) a run of the caller's. Only
    the user (and, for a logging token, the token) that opened it may open it again, naming its
    project, while they may still add runs to that project."""
    existing = _existing(client_id, user)
    if existing is not None:
        return _reopened(existing, user, logging_token, project)
    proj = project_for(project, user)
    try:
        with transaction.atomic():
            experiment = _experiment_for(user=user, project=proj, group=group, name=name, config=config or {})
            salt = new_salt()
            run = Run.objects.create(
                experiment=experiment,
                owner=user,
                name=name,
                config=config or {},
                attempt=1,
                max_attempts=1,
                backend=BACKEND,
                token_salt=salt,
                notes=notes,
            )
            # Through the state machine like every run (its history says so); in this transaction,
            # so no dispatcher ever sees it queued.
            run_transition(run=run, to=S.SUBMITTED, reason="opened by the opl SDK")
            run_transition(
                run=run, to=S.RUNNING, reason="logging from outside the lab's queue", last_heartbeat=timezone.now()
            )
            token = derive_token(run.pk, run.attempt, salt)
            Run.objects.filter(pk=run.pk).update(token_hash=token_hash(token))
            run.token_hash = token_hash(token)
            if tags:
                run.tags.set([Tag.objects.get_or_create(name=t)[0] for t in tags])
            ExternalRun.objects.create(
                run=run,
                owner=user,
                client_id=client_id,
                logging_token=logging_token,
                heartbeat_timeout_s=heartbeat_timeout_s,
            )
    except IntegrityError:  # the same client_id opened meanwhile: that run
        existing = _existing(client_id, user)
        if existing is None:
            raise
        return _reopened(existing, user, logging_token, project)
    return Opened(run=run, token=token, created=True)


def _existing(client_id: str, user: User) -> ExternalRun | None:
    return (
        ExternalRun.objects.select_related("run", "run__experiment__project")
        .filter(owner=user, client_id=client_id)
        .first()
    )


def _reopened(external: ExternalRun, user: User, logging_token: LoggingToken | None, project: str | None) -> Opened:
    """The run's token again, as when it was opened: to the user who opened it, for the project
    the request names (none: their personal project), while they may still add runs there. A
    member removed since gets the 404 that opening a new run there gets."""
    run = external.run
    if run.owner_id != user.pk or (logging_token is not None and external.logging_token_id != logging_token.pk):
        raise ExternalRunError("client_id", "belongs to a run you did not open", status=403)
    run_project = run.experiment.project
    named = run_project.name == project if project else run_project.personal_for_id == user.pk
    if not named:
        raise ExternalRunError(
            "project", "the run this client_id opened is in another project: name that one, or use a new client_id", 409
        )
    check_can_add_experiments(user, run_project)
    return Opened(run=run, token=derive_token(run.pk, run.attempt, run.token_salt), created=False)


def _experiment_for(*, user: User, project, group: str | None, name: str, config: dict) -> Experiment:
    """A run's experiment: the user's experiment named `group` in the project (a sweep of logged
    runs, judged together on the statistics page), else one of its own."""
    if group:
        found = Experiment.objects.filter(project=project, owner=user, name=group).order_by("pk").first()
        if found is not None:
            if found.state == Experiment.State.ENDED:
                Experiment.objects.filter(pk=found.pk).update(state=Experiment.State.ACTIVE)
            return found
    return Experiment.objects.create(name=group or name, project=project, owner=user, base_config=config)


def external_run_finish(*, run: Run, exit_code: int) -> bool:
    """The client's own end: 0 succeeded, anything else failed. False when the run had ended."""
    run.refresh_from_db()
    if run.state != S.RUNNING:
        return False
    to = S.SUCCEEDED if exit_code == 0 else S.FAILED
    reason = "finished" if exit_code == 0 else f"the trainer exited with code {exit_code}"
    return run_transition(run=run, to=to, reason=reason, exit_code=exit_code)


def external_runs_expire(now=None) -> int:
    """Fail the running external runs whose heartbeats stopped; how many."""
    now = now or timezone.now()
    failed = 0
    for external in ExternalRun.objects.select_related("run").filter(run__state=S.RUNNING):
        run = external.run
        beat = run.last_heartbeat or run.started_at
        if beat is not None and now - beat > timedelta(seconds=external.heartbeat_timeout_s):
            failed += run_transition(
                run=run,
                to=S.FAILED,
                reason=f"no heartbeat for {external.heartbeat_timeout_s} s: the logging process stopped "
                "without finish()",
            )
    return failed
