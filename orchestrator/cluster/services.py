"""Submitting, syncing and cancelling runs on a cluster backend.

No backend call happens inside a database transaction; every state change goes through
experiments.services.run_transition (a conditional UPDATE), so concurrent workers are safe.
"""

import logging
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from orchestrator.cluster import recovery
from orchestrator.cluster.backends import BackendError, JobState, JobStatus, configured_backend, get_backend
from orchestrator.cluster.backends.base import job_name
from orchestrator.cluster.jobspec import build_job_spec, run_dir_for
from orchestrator.cluster.models import Job
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import run_transition
from orchestrator.experiments.tokens import derive_token, new_salt, token_hash
from trainer.reporting import atomic_write_text
from trainer.run_markers import CANCEL_MARKER

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
    """Submit a queued run as a new attempt: at most one job per attempt, however many tasks
    call this for the run at once.

    Claiming (queued -> submitted) bumps the attempt, stores a fresh token salt and makes the
    caller the attempt's one submitter: the claim's `submitted_at` is a lease. Others that find
    the run submitted without a job id leave it alone while the claim is fresh (see
    `submit_stale_after`): the dispatcher enqueues a queued run again every few seconds while
    its submit task waits to retry, and two of those tasks, or a task and the sync, would
    otherwise both look the job name up, find nothing, and both submit. A stale claim (its
    submitter died) is taken over by exactly one of them (a conditional UPDATE of
    submitted_at), which carries on with the same attempt and salt: the job name is looked up
    on the cluster before anything is submitted.
    """
    run = Run.objects.select_related("experiment").get(pk=run_id)
    backend_name = backend_name or run.backend or settings.CLUSTER_BACKEND
    if run.state == S.QUEUED:
        claimed = run_transition(
            run=run,
            to=S.SUBMITTED,
            attempt=run.attempt + 1,
            token_salt=new_salt(),
            backend=backend_name,
            job_id="",
            exit_code=None,
            node_list="",
            run_dir=str(run_dir_for(run)),
        )
        if not claimed:
            return None
    elif not (run.state == S.SUBMITTED and not run.job_id):
        return None  # submitted already
    elif not _take_over_stale_claim(run):
        try:  # another task holds a fresh claim: only look, never submit
            return run if adopt_job_by_name(run) else None
        except BackendError as exc:
            recovery.record_error(run.backend, exc)
            return None
    clear_cancel_marker(run)  # a marker left by an earlier attempt's cancel must not stop this one
    token = derive_token(run.pk, run.attempt, run.token_salt)
    Run.objects.filter(pk=run.pk).update(token_hash=token_hash(token))
    run.token_hash = token_hash(token)
    backend = get_backend(run.backend)
    try:
        spec = build_job_spec(run, token, run_dir_for(run))  # may refuse: a fork whose parent is gone
        if not _renew_claim(run):
            return None  # the claim went stale while we got here and someone took it over
        job_id = backend.submit(spec)  # idempotent: finds the job a crashed attempt created
    except BackendError as exc:
        recovery.record_error(run.backend, exc)
        if exc.permanent:
            run_transition(run=run, to=S.FAILED, reason=f"submission refused: {exc}")
        elif exc.uncertain:
            # The submit was sent but not answered: the job may exist. Keep the claim (same
            # attempt and salt, so the same job name and comment); the sync looks the job up by
            # name and records it, or submits again once the claim is stale.
            Run.objects.filter(pk=run.pk, state=S.SUBMITTED, attempt=run.attempt, job_id="").update(
                state_reason=f"submitted, not confirmed ({exc}); looking the job up by name"
            )
            log.warning("run %s: submit of attempt %s unconfirmed: %s", run.pk, run.attempt, exc)
            return None
        else:  # cluster unreachable: back to the queue, nothing lost
            _unclaim(run, str(exc))
        raise
    record_job(run, job_id)
    if Run.objects.filter(pk=run.pk, cancel_requested=True).exists():
        _send_cancel(run, backend)  # cancelled while we were submitting: the cancel task found no job id
    return run


def _unclaim(run: Run, reason: str) -> None:
    """Give the claim back when the cluster could not be reached: the run returns to the queue
    with its attempt unspent (a history event says why), or ends cancelled when a cancel came
    while it was being submitted. The row is locked while deciding, so a cancel that arrives
    meanwhile waits and then finds the run queued (cancelled at once) rather than being lost."""
    with transaction.atomic():
        cancel = Run.objects.select_for_update().filter(pk=run.pk).values_list("cancel_requested", flat=True).first()
        if cancel:
            run_transition(run=run, to=S.CANCELLED, reason=f"cancelled before its job started ({reason})")
        else:
            run_transition(run=run, to=S.QUEUED, reason=reason, attempt=run.attempt - 1)


def adopt_job_by_name(run: Run) -> bool:
    """A claim without a job id (held by another task, or by one that died right after its
    submit went through): record the attempt's job if the backend has it, and stop it if a
    cancel came meanwhile. Read-only on the cluster, so it cannot make a second job. False while
    there is none; raises BackendError when the cluster cannot be asked."""
    backend = get_backend(run.backend)
    job_id = backend.find(job_name(run.pk, run.attempt))
    if not job_id:
        return False
    record_job(run, job_id)
    if Run.objects.filter(pk=run.pk, cancel_requested=True).exists():
        _send_cancel(run, backend)
    return True


def submit_stale_after(backend_name: str) -> timedelta:
    """How old a claim without a job id must be before anyone else may submit its attempt:
    SUBMIT_STALE_SECONDS, but never less than the backend's longest submit call, so a slow
    submit that is still on its way is never taken for a dead one."""
    floor = getattr(get_backend(backend_name), "submit_timeout_s", 0.0)
    return timedelta(seconds=max(settings.SUBMIT_STALE_SECONDS, floor + 5 if floor else 0))


def _take_over_stale_claim(run: Run) -> bool:
    if run.submitted_at and timezone.now() - run.submitted_at < submit_stale_after(run.backend):
        return False
    return _renew_claim(run)


def _renew_claim(run: Run) -> bool:
    """Hold the claim for another stale period from now; False if someone took it over (or it
    moved on) since we read it. Conditional on the submitted_at we read: of two callers that
    read the same claim, one wins."""
    now = timezone.now()
    renewed = Run.objects.filter(
        pk=run.pk, state=S.SUBMITTED, attempt=run.attempt, job_id="", submitted_at=run.submitted_at
    ).update(submitted_at=now)
    if renewed:
        run.submitted_at = now
    return renewed == 1


def record_job(run: Run, job_id: str) -> None:
    """Remember the job of the run's current attempt (idempotent: a retry writes the same)."""
    try:
        Job.objects.update_or_create(
            run=run,
            attempt=run.attempt,
            defaults={"backend": run.backend, "name": job_name(run.pk, run.attempt), "job_id": job_id},
        )
    except IntegrityError:
        pass
    Run.objects.filter(pk=run.pk, attempt=run.attempt).update(job_id=job_id)
    run.job_id = job_id


def reconcile_submissions(now=None) -> int:
    """Runs claimed for submission that have no job id: their submit task died or failed after
    the job started (worker killed, a database error, a submit sent but not answered). Look
    the job up by name on the backend and record its id; when the backend has none and the
    claim is stale (submit_stale_after), submit again (same attempt, same name; run_submit
    lets one caller take the claim over). Returns how many runs were repaired."""
    now = now or timezone.now()
    settle = now - timedelta(seconds=5)  # leave a live submit task its few seconds
    repaired = 0
    for run in Run.objects.filter(state=S.SUBMITTED, job_id="", submitted_at__lt=settle).order_by("pk"):
        try:
            found = adopt_job_by_name(run)
        except BackendError as exc:
            recovery.record_error(run.backend, exc)
            continue
        if found:
            log.info("run %s: found job %s by name after an interrupted submit", run.pk, run.job_id)
            repaired += 1
        elif now - run.submitted_at < submit_stale_after(run.backend):
            continue
        elif run.cancel_requested:
            repaired += run_transition(run=run, to=S.CANCELLED, reason="cancelled before its job started")
        else:
            log.warning("run %s: its submit never created a job; submitting again", run.pk)
            try:
                repaired += run_submit(run_id=run.pk) is not None
            except BackendError:
                pass  # run_submit recorded it and put the run back in the queue or failed it
    return repaired


def sync_active_runs(backend_name: str | None = None) -> int:
    """One status request per backend for every active run; returns how many runs changed.

    Also repairs interrupted submissions, re-sends cancels that have not reached their job,
    and finalises lost runs whose job the backend still remembers as ended."""
    changed = reconcile_submissions()
    resend_cancels()
    runs = list(Run.objects.filter(state__in=Run.ACTIVE).exclude(job_id=""))
    runs += _lost_but_unsettled()
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
    backend = configured_backend()
    if backend.capabilities.this_machine:
        recovery.record_sync(backend.name)  # its cluster page shows the worker's last sync
    return changed


def _lost_but_unsettled() -> list[Run]:
    """Lost runs of the last day whose job never reported a final state: the backend's own
    record (exit.json, Slurm accounting) may still tell how they ended."""
    since = timezone.now() - timedelta(days=1)
    final = Job.objects.filter(final=True).values("run_id", "attempt")
    runs = Run.objects.filter(state=S.LOST, finished_at__gte=since).exclude(job_id="")
    settled = {(j["run_id"], j["attempt"]) for j in final.filter(run__in=runs)}
    return [run for run in runs if (run.pk, run.attempt) not in settled]


def sync_one_run(run: Run, status: JobStatus | None) -> bool:
    if run.state == S.LOST:
        return _settle_lost(run, status)
    if status is None:
        return _maybe_lost(run)
    Job.objects.filter(run=run, attempt=run.attempt).update(
        native_state=status.native_state,
        reason=status.reason,
        exit_code=status.exit_code,
        nodes=status.nodes,
        started_at=status.started_at,
        ended_at=status.ended_at,
        final=status.state.is_terminal,
        last_seen_at=timezone.now(),
    )
    if status.state.is_terminal and recovery.maybe_requeue(run, status):
        return True  # the cluster failed it: a new attempt resumes from the checkpoint
    target = JOB_TO_RUN[status.state]
    if run.cancel_requested and status.state.is_terminal and target != S.SUCCEEDED:
        target = S.CANCELLED  # e.g. Slurm's FAILED with the trainer's exit 130 after our SIGTERM
    changed = False
    for step in _path(run.state, target, started=status.started_at is not None):
        final = step == target
        changed |= run_transition(
            run=run,
            to=step,
            reason=status.reason if final else "",
            node_list=status.nodes,
            **({"exit_code": status.exit_code} if final and step not in ORDER else {}),
        )
    reason = cancelling_reason(status.reason) if run.cancel_requested and run.is_active else status.reason
    if target == run.state and reason != run.state_reason:
        Run.objects.filter(pk=run.pk, state=run.state).update(state_reason=reason)
        changed = True
    return changed


def cancelling_reason(detail: str = "") -> str:
    return "cancelling: the job is checkpointing and stopping" + (f" ({detail})" if detail else "")


def _settle_lost(run: Run, status: JobStatus | None) -> bool:
    if status is None or not status.state.is_terminal:
        return False
    Job.objects.filter(run=run, attempt=run.attempt).update(
        native_state=status.native_state,
        reason=status.reason,
        exit_code=status.exit_code,
        ended_at=status.ended_at,
        final=True,
        last_seen_at=timezone.now(),
    )
    target = (
        S.CANCELLED if run.cancel_requested and status.state is not JobState.SUCCEEDED else JOB_TO_RUN[status.state]
    )
    return run_transition(
        run=run,
        to=target,
        exit_code=status.exit_code,
        reason=f"{status.reason or status.state.value} (recorded late from the cluster's record)",
    )


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
    """Make a requested cancel reach the run's job: write the cancel marker the trainer reads,
    find the job by name when no id was recorded, and ask the backend to stop it (the trainer
    checkpoints and exits). Never silent: what is still pending is in the run's reason, and
    the sync re-sends a cancel the backend did not take. True when the backend took it."""
    run = Run.objects.get(pk=run_id)
    if not run.is_active:
        return False
    if not run.cancel_requested:
        Run.objects.filter(pk=run.pk).update(cancel_requested=True)
        run.cancel_requested = True
    write_cancel_marker(run)  # before the job is looked up: a job found by name may start meanwhile
    backend = get_backend(run.backend)
    if not run.job_id:
        try:
            job_id = backend.find(job_name(run.pk, run.attempt)) if run.attempt else None
        except BackendError as exc:
            _note_cancel_pending(run, f"the cluster could not be asked for the job ({exc}); retrying")
            return False
        if not job_id:
            # the submit is in flight: run_submit cancels the job it creates, and the sync
            # finalises a claim whose submit died (reconcile_submissions)
            _note_cancel_pending(run, "waiting for the job to be created, then stopping it")
            return False
        record_job(run, job_id)
    return _send_cancel(run, backend)


def resend_cancels() -> int:
    """Cancels requested but not yet taken by the backend (it was down, or the job had no id)."""
    sent = 0
    for run in Run.objects.filter(state__in=Run.ACTIVE, cancel_requested=True).exclude(job_id=""):
        if not Job.objects.filter(run=run, attempt=run.attempt, cancel_sent_at__isnull=False).exists():
            sent += _send_cancel(run, get_backend(run.backend))
    return sent


def _send_cancel(run: Run, backend) -> bool:
    # Every cancel sent carries the marker, the sync's re-send too: without it the trainer reads
    # the signal as a preemption, stops for a requeue (exit 75) and the run's ending contradicts it.
    write_cancel_marker(run)
    try:
        backend.cancel(run.job_id)  # idempotent
    except BackendError as exc:
        recovery.record_error(run.backend, exc)
        _note_cancel_pending(run, f"the cluster did not take the cancel yet ({exc}); retrying")
        return False
    Job.objects.filter(run=run, attempt=run.attempt).update(cancel_sent_at=timezone.now())
    Run.objects.filter(pk=run.pk, state__in=Run.ACTIVE).update(state_reason=cancelling_reason())
    return True


def _note_cancel_pending(run: Run, why: str) -> None:
    Run.objects.filter(pk=run.pk, state__in=Run.ACTIVE).update(state_reason=f"cancelling: {why}")


def write_cancel_marker(run: Run) -> None:
    """The trainer reads this on SIGTERM/SIGUSR1 to tell a person's cancel from a preemption
    (trainer/cli.py); on Slurm the run directory is shared with the node."""
    if not run.run_dir:
        return
    try:
        atomic_write_text(Path(run.run_dir) / CANCEL_MARKER, f"attempt {run.attempt}\n")
    except OSError as exc:
        log.warning("run %s: could not write the cancel marker: %s", run.pk, exc)


def clear_cancel_marker(run: Run) -> None:
    try:
        (Path(run.run_dir or run_dir_for(run)) / CANCEL_MARKER).unlink(missing_ok=True)
    except OSError:
        pass
