"""The cluster page on the local backend: this machine's cores and memory, active runs against
the limit (one per core by default), and whether the worker's periodic sync is alive."""

import os
from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.cluster import recovery
from orchestrator.cluster.models import ClusterHealth
from orchestrator.cluster.services import sync_active_runs

pytestmark = pytest.mark.django_db


@pytest.fixture
def page(client, alice, settings, tmp_path):
    settings.CLUSTER_BACKEND = "local"
    settings.SLURM_REST_URL = ""
    settings.LOCAL_JOBS_DIR = tmp_path / "jobs"
    client.force_login(alice)
    return lambda: client.get("/cluster/health").content.decode()


def test_local_page_shows_cores_memory_limit_and_a_worker_that_never_synced(page, settings):
    html = page()
    assert f'id="local-cores">{len(os.sched_getaffinity(0))}<' in html
    assert "GB free of" in html
    assert f'id="local-active">0 / {settings.MAX_ACTIVE_RUNS}<' in html
    assert "never synced" in html


def test_the_worker_shows_alive_after_a_sync_and_silent_after_a_minute(page):
    sync_active_runs()  # what beat runs every 3 s
    assert "alive (last sync" in page()
    ClusterHealth.objects.filter(backend="local").update(last_ok_at=timezone.now() - timedelta(minutes=5))
    assert "silent" in page()
    recovery.record_sync("local")
    assert "alive (last sync" in page()


def test_the_default_limit_is_one_run_per_core():
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OPL_MAX_ACTIVE_RUNS"}
    env["CLUSTER_BACKEND"] = "local"
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']="
            "'orchestrator.settings'; django.setup(); from django.conf import settings; "
            "print(settings.MAX_ACTIVE_RUNS)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(out.stdout.strip()) == len(os.sched_getaffinity(0))
