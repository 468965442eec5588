"""Submitting, syncing and cancelling runs on a cluster backend.

No backend call happens inside a database transaction; every state change goes through
experiments.services.run_transition (a conditional UPDATE), so concurrent workers are safe.
"""
import logging
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

from orchestrator.cluster import recovery
from orchestrator.cluster.backends import BackendError, JobState, JobStatus, get_backend
from orchestrator.cluster.jobspec import build_job_spec, run_dir_for
from orchestrator.cluster.models import Job
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import run_transition
from orchestrator.experiments.tokens import derive_token, new_salt, token_hash

log = logging.getLogger(__name__)
S = Run.State

JOB_TO_RUN = {
    JobState.PENDING: S.PENDING,
    JobState.RUNNING: S.RUNNING,
    JobState.SUCCEEDED: S.SUCCEEDED,
    JobState.FAILED: S.FAILED,
    JobState.CANCELLED: S.CANCELLED,
    JobState.TIMEOUT: S.FAILED,
    JobState.INFRA_FAILED: S.FAILED,
}
# The path a run takes through the non-terminal states, so a fast job that is already running
# (or finished) when first polled still records pending and running in order.
ORDER = [S.SUBMITTED, S.PENDING, S.RUNNING]


def run_submit(*, run_id: int, backend_name: str | None = None) -> Run | None:
    """Submit a queued run as a new attempt; idempotent if retried after a crash.

    Claiming (queued -> submitted) bumps the attempt and stores a fresh token salt. A retry of
    the same task finds the run `submitted` without a job id and carries on with the same
    attempt and salt: the job name is looked up on the cluster before anything is submitted.
    """
    run = Run.objects.select_related("experiment").get(pk=run_id)
    backend_name = backend_name or run.backend or settings.CLUSTER_BACKEND
    if run.state == S.QUEUED:
        claimed = run_transition(
            run=run, to=S.SUBMITTED, attempt=run.attempt + 1, token_salt=new_salt(), backend=backend_name,
            job_id="", exit_code=None, node_list="", run_dir=str(run_dir_for(run)),
        )
        if not claimed:
            return None
    elif not (run.state == S.SUBMITTED and not run.job_id):
        return None  # someone else submitted it already
    token = derive_token(run.pk, run.attempt, run.token_salt)
    Run.objects.filter(pk=run.pk).update(token_hash=token_hash(token))
    run.token_hash = token_hash(token)
    backend = get_backend(run.backend)
    spec = build_job_spec(run, token, run_dir_for(run))
    try:
        job_id = backend.submit(spec)  # idempotent: finds the job a crashed attempt created
    except BackendError as exc:
        recovery.record_error(run.backend, exc)
        if exc.permanent:
            run_transition(run=run, to=S.FAILED, reason=f"submission refused: {exc}")
        else:  # cluster unreachable: back to the queue, nothing lost
            Run.objects.filter(pk=run.pk, state=S.SUBMITTED).update(state=S.QUEUED, state_reason=str(exc),
                                                                     attempt=run.attempt - 1)
        raise
    try:
        Job.objects.update_or_create(
            run=run, attempt=run.attempt,
            defaults={"backend": run.backend, "name": spec.name, "job_id": job_id},
        )
    except IntegrityError:
        pass
    Run.objects.filter(pk=run.pk).update(job_id=job_id)
    run.job_id = job_id
    if Run.objects.filter(pk=run.pk, cancel_requested=True).exists():
        backend.cancel(job_id)  # cancelled while we were submitting: the cancel task found no job id
    return run


def sync_active_runs(backend_name: str | None = None) -> int:
    """One status request per backend for every active run; returns how many runs changed."""
    runs = list(Run.objects.filter(state__in=Run.ACTIVE).exclude(job_id=""))
    changed = 0
    for name in {run.backend for run in runs}:
        if backend_name and name != backend_name:
            continue
        group = [run for run in runs if run.backend == name]
        try:
            statuses = get_backend(name).statuses([run.job_id for run in group])
        except BackendError as exc:
            log.warning("status poll on %s failed, states may be stale: %s", name, exc)
            recovery.record_error(name, exc)
            # a failed poll changes no state, but each run says why it is not updating
            Run.objects.filter(pk__in=[run.pk for run in group]).update(state_reason=f"Status unknown: {exc}")
            continue
        recovery.record_ok(name)
        for run in group:
            changed += sync_one_run(run, statuses.get(run.job_id))
    changed += recovery.flag_stalled()
    return changed


def sync_one_run(run: Run, status: JobStatus | None) -> bool:
    if status is None:
        return _maybe_lost(run)
    Job.objects.filter(run=run, attempt=run.attempt).update(
        native_state=status.native_state, reason=status.reason, exit_code=status.exit_code,
        nodes=status.nodes, started_at=status.started_at, ended_at=status.ended_at,
        final=status.state.is_terminal, last_seen_at=timezone.now(),
    )
    if status.state.is_terminal and recovery.maybe_requeue(run, status):
        return True  # the cluster failed it: a new attempt resumes from the checkpoint
    target = JOB_TO_RUN[status.state]
    changed = False
    for step in _path(run.state, target, started=status.started_at is not None):
        final = step == target
        changed |= run_transition(
            run=run, to=step, reason=status.reason if final else "", node_list=status.nodes,
            **({"exit_code": status.exit_code} if final and step not in ORDER else {}),
        )
    if target == run.state and status.reason != run.state_reason:
        Run.objects.filter(pk=run.pk).update(state_reason=status.reason)
        changed = True
    return changed


def _path(current: str, target: str, *, started: bool) -> list[str]:
    """The states to pass through from current to target, so that a job first seen already
    running (or finished) still records pending and running in order."""
    if current not in ORDER or current == target:
        return []
    here = ORDER.index(current)
    if target in ORDER:
        return ORDER[here + 1 : ORDER.index(target) + 1] if ORDER.index(target) > here else []
    through = [S.PENDING, S.RUNNING] if started else [S.PENDING]
    return [s for s in through if ORDER.index(s) > here] + [target]


def _maybe_lost(run: Run) -> bool:
    # the grace runs from when the cluster last reported the job, not from its start
    last_seen = Job.objects.filter(run=run, attempt=run.attempt).values_list("last_seen_at", flat=True).first()
    since = last_seen or run.started_at or run.pending_at or run.submitted_at or timezone.now()
    if timezone.now() - since < timedelta(seconds=settings.LOST_GRACE_SECONDS):
        return False
    return run_transition(run=run, to=S.LOST, reason="the job disappeared from the cluster without a final state")


def run_cancel(*, run_id: int) -> bool:
    """Ask the backend to stop an active run (the trainer checkpoints and exits)."""
    run = Run.objects.get(pk=run_id)
    if not run.is_active or not run.job_id:
        return False
    Run.objects.filter(pk=run.pk).update(cancel_requested=True)
    get_backend(run.backend).cancel(run.job_id)  # idempotent: safe to repeat every tick
    return True
