"""What sets one backend apart is answered by the backend (requeue on a time limit, a fixed GPU
count, the cluster page's sections), and CLUSTER_BACKEND is checked against the registered
backends at startup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import timezone

from orchestrator.cluster.backends import get_backend
from orchestrator.cluster.backends.base import JobState, JobStatus
from orchestrator.cluster.backends.registry import REGISTRY
from orchestrator.cluster.models import ClusterProfile, Job
from orchestrator.cluster.recovery import maybe_requeue
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT = JobStatus(job_id="77", state=JobState.TIMEOUT, native_state="TIMEOUT", reason="Reached its time limit")


def start_with(**env: str) -> subprocess.CompletedProcess:
    """`manage.py check` as a server or worker starts: settings load first."""
    full = {**os.environ, "SLURM_REST_URL": "", "SLURM_REST_USER": "", "SLURM_JWT": "", "SLURM_JWT_KEY_FILE": ""}
    return subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unknown_backend_stops_startup_naming_the_setting_and_the_known_backends():
    done = start_with(CLUSTER_BACKEND="kubernetes")
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "ImproperlyConfigured: CLUSTER_BACKEND: unknown cluster backend 'kubernetes'" in last
    assert last.endswith(f"known backends: {', '.join(REGISTRY)}")


def test_a_backend_without_the_settings_it_needs_stops_startup_naming_them():
    done = start_with(CLUSTER_BACKEND="slurm", SLURM_REST_URL="http://127.0.0.1:9")
    assert done.returncode != 0
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith("CLUSTER_BACKEND=slurm needs SLURM_REST_USER, SLURM_JWT or SLURM_JWT_KEY_FILE")
    )


def test_a_registered_backend_with_its_settings_starts():
    done = start_with(CLUSTER_BACKEND="local")
    assert done.returncode == 0, done.stderr


def test_every_registered_backend_answers_the_capabilities_interface():
    for name, registered in REGISTRY.items():
        backend = get_backend(name)
        assert backend.name == name and backend.capabilities == registered.capabilities
        for method in ("health", "is_configured", "requeues_on_timeout", "fixed_gpus", "submit", "cancel"):
            assert callable(getattr(backend, method)), f"{name} lacks {method}"


@pytest.fixture
def run_on(alice, tiny_config):
    def make(backend: str) -> Run:
        run = experiment_create(owner=alice, name=f"on-{backend}", config=tiny_config).runs.get()
        Run.objects.filter(pk=run.pk).update(
            state=Run.State.RUNNING, attempt=1, backend=backend, job_id="77", started_at=timezone.now()
        )
        Job.objects.create(run=run, attempt=1, backend=backend, name=f"opl-{run.pk}-a1", job_id="77")
        run.refresh_from_db()
        return run

    return make


@pytest.mark.django_db
def test_a_time_limit_requeues_only_where_the_backend_places_runs_by_a_profile_that_says_so(run_on):
    ClusterProfile.objects.create(name="long", is_default=True, requeue_on_timeout=True)
    assert not maybe_requeue(run_on("local"), TIMEOUT)
    on_cluster = run_on("slurm")
    assert maybe_requeue(on_cluster, TIMEOUT) and on_cluster.state == "queued"


@pytest.mark.django_db
@pytest.mark.parametrize(("backend", "gpus"), [("slurm", 2), ("local", 0)])
def test_the_default_profile_fixes_gpu_counts_only_on_a_backend_with_profiles(
    backend, gpus, alice, tiny_config, settings
):
    settings.CLUSTER_BACKEND = backend
    ClusterProfile.objects.create(name="two", is_default=True, gpus=2)
    run = experiment_create(owner=alice, name="gpus", config=tiny_config).runs.get()
    assert run.gpus == gpus


@pytest.mark.django_db
def test_the_cluster_page_shows_this_machine_or_the_cluster_by_what_the_backend_answers(client, alice, settings):
    settings.SLURM_REST_URL = ""
    settings.CLUSTER_BACKEND = "local"
    client.force_login(alice)
    page = client.get("/cluster/health").content.decode()
    assert 'id="local-summary"' in page and 'id="cluster-summary"' not in page
    settings.SLURM_REST_URL = "http://127.0.0.1:9"  # a cluster set up beside the local backend: reported too
    page = client.get("/cluster/health").content.decode()
    assert 'id="local-summary"' in page and 'id="cluster-summary"' in page
    settings.CLUSTER_BACKEND = "slurm"
    page = client.get("/cluster/health").content.decode()
    assert 'id="local-summary"' not in page and "unreachable" in page
