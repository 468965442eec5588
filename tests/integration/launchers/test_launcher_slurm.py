"""A launcher's run on the live Slurm test clusters (22.05 and 24.11): queued through the API,
submitted through slurmrestd, tiny_sdk.py logging with the `opl` SDK to the live server from the job.
Cancel is scancel's SIGTERM with the dashboard's cancel-requested marker (docs/RELIABILITY.md);
the cluster's stop for requeue is SIGUSR1 (a preemption's warning), after which the run is
requeued as attempt 2 and resumes from the script's progress file."""

import json
import os
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from orchestrator.cluster.backends import get_backend
from orchestrator.cluster.models import ClusterProfile
from orchestrator.cluster.services import run_cancel
from orchestrator.launchers.services import launcher_upsert
from tests.integration.launchers.flow import drive, queue_run
from tests.integration.slurm.conftest import PYTHON, cluster, slurm_run_root  # noqa: F401 (fixtures)
from tests.slurm_rest import wait_for_slurmrestd
from tests.unit.launchers.helpers import tiny_sdk

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def slurm_stack(settings, cluster, live_server):  # noqa: F811 (the cluster fixture)
    wait_for_slurmrestd(cluster.env, cluster.id)
    settings.CLUSTER_BACKEND = "slurm"
    settings.SLURM_REST_URL = cluster.env["SLURM_REST_URL"]
    settings.SLURM_REST_USER = cluster.env["SLURM_REST_USER"]
    settings.SLURM_JWT = ""
    settings.SLURM_JWT_KEY_FILE = cluster.env["SLURM_JWT_KEY_FILE"]
    settings.SLURM_RUN_DIR_MODE = "1777"
    settings.RUNS_DIR = cluster.run_root / f"launchers-{os.getpid()}-{int(time.time() * 1000) % 10**8}"
    settings.TRAINER_PYTHON = PYTHON
    settings.PUBLIC_URL = live_server.url
    settings.RUNS_DIR.mkdir(parents=True)
    os.chmod(settings.RUNS_DIR, 0o1777)
    ClusterProfile.objects.create(name="test", is_default=True, partition=cluster.env["SLURM_PARTITION"])
    launcher_upsert(by=User.objects.create_user("sam", is_staff=True), data=tiny_sdk())
    yield settings
    cluster.cancel_leftovers()


def outcome(run) -> dict:
    return json.loads((Path(run.run_dir) / "signal.json").read_text())


def test_a_launcher_run_on_slurm_logs_its_metrics_and_succeeds(slurm_stack, alice, api_client, client):
    run = queue_run(api_client, alice, steps=3, lr=0.5, sleep=0, note="a b; $(id)")
    run = drive(run, lambda r: r.is_terminal, timeout=180)
    assert (run.state, run.exit_code, run.step) == ("succeeded", 0, 3), run.state_reason
    assert list(run.events.values_list("to_state", flat=True)) == ["submitted", "pending", "running", "succeeded"]
    client.force_login(alice)
    assert [p[0] for p in client.get(f"/api/v1/runs/{run.pk}/metrics?key=train/loss").json()["points"]] == [1, 2, 3]
    assert json.loads((Path(run.run_dir) / "received.json").read_text())["note"] == "a b; $(id)"
    assert "tiny_sdk: done" in client.get(f"/runs/{run.pk}/job").content.decode()


def test_cancel_reaches_the_launcher_job_on_slurm(slurm_stack, alice, api_client, client):
    run = queue_run(api_client, alice, steps=100000, sleep=0.2)
    run = drive(run, lambda r: r.step >= 2, timeout=180)
    client.force_login(alice)
    assert client.post(f"/api/v1/runs/{run.pk}/cancel").status_code == 200
    run_cancel(run_id=run.pk)  # what the worker's cancel_run task does: the marker, then scancel
    run = drive(run, lambda r: r.is_terminal, timeout=180)
    assert run.state == "cancelled", run.state_reason
    assert outcome(run) == {"signal": "SIGTERM", "step": outcome(run)["step"], "cancelled": True}


def test_sigusr1_requeues_the_launcher_run_which_resumes(slurm_stack, alice, api_client, client):
    run = queue_run(api_client, alice, steps=30, sleep=0.25)
    run = drive(run, lambda r: r.step >= 2, timeout=180)
    get_backend("slurm").signal(run.job_id, "SIGUSR1")  # what a preemption's warning sends
    run = drive(run, lambda r: r.attempt == 2, timeout=180)
    stopped = outcome(run)
    assert stopped["signal"] == "SIGUSR1" and not stopped["cancelled"]
    run = drive(run, lambda r: r.is_terminal, timeout=180)
    assert (run.state, run.attempt, run.step) == ("succeeded", 2, 30), run.state_reason
    history = list(run.events.values_list("to_state", flat=True))
    assert history[:5] == ["submitted", "pending", "running", "queued", "submitted"], history
    client.force_login(alice)
    steps = [p[0] for p in client.get(f"/api/v1/runs/{run.pk}/metrics?key=train/loss").json()["points"]]
    assert steps == list(range(1, 31)), steps  # attempt 2 went on where attempt 1 stopped
