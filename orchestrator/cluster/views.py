"""Cluster pages: the job card of a run (state detail and log tail), the health view and its queue."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.shortcuts import render
from django.utils import timezone

from orchestrator.cluster.backends import configured_backend, get_backend, reported_cluster
from orchestrator.cluster.models import ClusterHealth, Job
from orchestrator.cluster.queue_view import cluster_queue
from orchestrator.cluster.slurm.logs import tail
from orchestrator.experiments.access import get_run_for_user
from orchestrator.experiments.models import Run
from orchestrator.experiments.run_status import status_context

WORKER_SILENT_S = 60


def run_job(request, run_id: int):
    """The run's job details and the tail of its stdout/stderr (polled by the run page). When the
    page's `seen` version of the run's status is out of date, the answer also carries the run's
    facts card and header badge (out of band), so header, job card, reason and actions change
    together (experiments/run_status.py)."""
    run = get_run_for_user(request.user, run_id)
    job = Job.objects.filter(run=run, attempt=run.attempt).first()
    logs: dict[str, str] = {}
    if run.backend and run.run_dir and run.attempt:
        try:
            paths = get_backend(run.backend).log_paths(Path(run.run_dir), run.attempt)
        except Exception:
            paths = {}
        logs = {name: tail(path, lines=40) for name, path in paths.items()}
    context = {"run": run, "job": job, "logs": logs}
    if (seen := request.GET.get("seen")) is not None:
        status = status_context(request.user, run)
        if status["status_version"] != seen:
            context.update(status, status_changed=True)
    return render(request, "cluster/_run_job_detail.html", context)


def cluster_health(request):
    """Reachable or not, API version, partitions, nodes and GPUs, our jobs, the last error; for
    a backend on this machine its cores and memory, active runs against the limit and
    whether the worker's periodic sync is alive."""
    cluster = reported_cluster()
    records = {h.backend: h for h in ClusterHealth.objects.all()}
    active = Run.objects.filter(backend=cluster.name, state__in=Run.ACTIVE).count() if cluster else 0
    queued = Run.objects.filter(state=Run.State.QUEUED).count()
    return render(
        request,
        "cluster/health.html",
        {
            **cluster_queue(request.user),
            "report": cluster.health() if cluster else None,
            "record": records.get(cluster.name) if cluster else None,
            "active_runs": active,
            "queued_runs": queued,
            "backend": settings.CLUSTER_BACKEND,
            "machine": _machine_report(records),
        },
    )


def cluster_queue_fragment(request):
    """The queue card alone, for its htmx poll."""
    return render(request, "cluster/_queue.html", cluster_queue(request.user))


def _machine_report(records: dict[str, ClusterHealth]) -> dict | None:
    backend = configured_backend()
    if not backend.capabilities.this_machine:
        return None
    record = records.get(backend.name)
    last_sync = record.last_ok_at if record else None
    age = (timezone.now() - last_sync).total_seconds() if last_sync else None
    return {
        **backend.health(),
        "active": Run.objects.filter(backend=backend.name, state__in=Run.ACTIVE).count(),
        "limit": settings.MAX_ACTIVE_RUNS,
        "last_sync": last_sync,
        # beat syncs every 3 s and the sync notes itself every 10 s: a minute means no worker
        "worker_alive": age is not None and age < WORKER_SILENT_S,
    }
