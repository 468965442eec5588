"""What sync does beyond mapping states: requeue after the cluster's faults, flag stalled
runs, and remember each backend's last error for the health view.

Called from services.sync_active_runs / sync_one_run / run_submit.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from orchestrator.cluster.backends import BackendError, JobState, JobStatus, get_backend, is_backend
from orchestrator.cluster.models import ClusterHealth, Job
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import run_transition

log = logging.getLogger(__name__)
S = Run.State


def _requeue_on_timeout(run: Run) -> bool:
    return is_backend(run.backend) and get_backend(run.backend).requeues_on_timeout(_profile_name(run))


def _profile_name(run: Run) -> str:
    cluster = (run.config or {}).get("cluster") or {}
    return str(cluster.get("profile") or "") if isinstance(cluster, dict) else ""


def is_cluster_fault(run: Run, status: JobStatus) -> bool:
    """Failed through the cluster's fault (node failure, preemption, boot failure; a time
    limit too when the profile says so): the run deserves another attempt.

    A trainer that exits EX_TEMPFAIL (75) was told by the cluster to stop, checkpointed and asked
    to be requeued (trainer/cli.py): a preemption with a GraceTime, or `--signal=USR1@...`, ends
    the job FAILED with that code rather than PREEMPTED."""
    stopped_for_requeue = status.state is JobState.FAILED and status.exit_code == os.EX_TEMPFAIL
    return (
        status.state is JobState.INFRA_FAILED
        or stopped_for_requeue
        or (status.state is JobState.TIMEOUT and _requeue_on_timeout(run))
    )


def maybe_requeue(run: Run, status: JobStatus) -> bool:
    """Put the run back in the queue as a new attempt (resuming from its last checkpoint)
    if the cluster failed it and attempts remain. True when requeued."""
    if not is_cluster_fault(run, status) or run.cancel_requested:
        return False
    if run.attempt >= run.max_attempts:
        return False
    if "RESTARTED" in status.native_state:
        # Slurm requeued the job itself (22.05 cannot turn that off): stop its copy first
        try:
            get_backend(run.backend).cancel(status.job_id)
        except BackendError as exc:
            log.warning("run %s: could not cancel Slurm's requeued job %s: %s", run.pk, status.job_id, exc)
            return False  # try again on the next sync
    reason = (
        f"{status.reason}; requeued as attempt {run.attempt + 1} of {run.max_attempts}, "
        "resuming from the last checkpoint"
    )
    return run_transition(run=run, to=S.QUEUED, reason=reason)


def flag_stalled(now=None) -> int:
    """Flag running runs whose heartbeats stopped (OPL_STALL_SECONDS), clear recovered ones."""
    now = now or timezone.now()
    limit = timedelta(seconds=getattr(settings, "STALL_SECONDS", 600))
    changed = 0
    for run in Run.objects.filter(state=S.RUNNING):
        last = run.last_heartbeat or run.started_at
        job = Job.objects.filter(run=run, attempt=run.attempt).first()
        if job is None or last is None:
            continue
        stalled = now - last > limit
        if stalled and job.stalled_since is None:
            Job.objects.filter(pk=job.pk).update(stalled_since=now)
            minutes = int((now - last).total_seconds() // 60)
            Run.objects.filter(pk=run.pk, state=S.RUNNING).update(
                state_reason=f"Stalled? No heartbeat for {minutes} min while the job is running"
            )
            changed += 1
        elif not stalled and job.stalled_since is not None:
            Job.objects.filter(pk=job.pk).update(stalled_since=None)
            Run.objects.filter(pk=run.pk, state=S.RUNNING, state_reason__startswith="Stalled?").update(state_reason="")
            changed += 1
    return changed


def record_ok(backend: str) -> None:
    ClusterHealth.objects.update_or_create(backend=backend, defaults={"last_ok_at": timezone.now()})


def record_error(backend: str, exc: Exception) -> None:
    ClusterHealth.objects.update_or_create(
        backend=backend, defaults={"last_error": str(exc), "last_error_at": timezone.now()}
    )


def record_sync(backend: str, every_s: float = 10.0) -> None:
    """Note that a sync ran (the local cluster page shows the worker as alive from this); at most
    one write per `every_s`, so the embedded SQLite is not written every tick."""
    now = timezone.now()
    stale = ClusterHealth.objects.filter(backend=backend, last_ok_at__gte=now - timedelta(seconds=every_s))
    if not stale.exists():
        record_ok(backend)
