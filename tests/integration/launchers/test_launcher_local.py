"""A launcher's run on the local backend, end to end with real parts: staff define the example
launcher, a user queues a run through the API, the queue policy dispatches it, the job runs
examples/launchers/tiny_sdk.py as a subprocess whose `opl` SDK pushes its metrics over HTTP to the live
server with the run's token, and the metrics API serves them. Cancel reaches it as SIGINT.

The services are driven in-process, as the Celery tasks call them (dispatch, submit, sync)."""

import json
import math
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from orchestrator.cluster.services import run_cancel
from orchestrator.launchers.services import launcher_upsert
from tests.integration.launchers.flow import drive, queue_run
from tests.unit.launchers.helpers import tiny_sdk

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def local_stack(settings, live_server, tmp_path):
    settings.CLUSTER_BACKEND = "local"
    settings.PUBLIC_URL = live_server.url
    settings.RUNS_DIR = tmp_path / "runs"
    settings.LOCAL_JOBS_DIR = tmp_path / "jobs"
    settings.CANCEL_GRACE_SECONDS = 10
    staff = User.objects.create_user("sam", is_staff=True)
    launcher_upsert(by=staff, data=tiny_sdk())
    return settings


def test_a_launcher_run_logs_its_metrics_and_succeeds(local_stack, alice, api_client, client):
    run = queue_run(api_client, alice, steps=3, lr=0.5, sleep=0, note="a b; $(touch x)")
    run = drive(run, lambda r: r.is_terminal)
    assert run.state == "succeeded", run.state_reason
    assert list(run.events.values_list("to_state", flat=True)) == ["submitted", "pending", "running", "succeeded"]
    assert (run.exit_code, run.step) == (0, 3)

    client.force_login(alice)
    series = client.get(f"/api/v1/runs/{run.pk}/metrics?key=train/loss").json()
    assert [p[0] for p in series["points"]] == [1, 2, 3]
    assert [p[1] for p in series["points"]] == pytest.approx([math.exp(-0.5 * s) for s in (1, 2, 3)])
    received = json.loads((Path(run.run_dir) / "received.json").read_text())
    assert received["note"] == "a b; $(touch x)"  # one argument, never a shell's
    assert {"OPL_URL", "OPL_TOKEN", "OPL_RUN_ID", "OPL_ATTEMPT"} <= set(received["env"])
    assert not (Path(run.run_dir) / "x").exists()
    job_page = client.get(f"/runs/{run.pk}/job").content.decode()  # the log view of any run
    assert "tiny_sdk: done" in job_page


def test_cancel_reaches_the_launcher_job_as_sigint(local_stack, alice, api_client, client):
    run = queue_run(api_client, alice, steps=100000, sleep=0.1)
    run = drive(run, lambda r: r.step >= 2)  # running, its handlers installed, metrics arriving
    client.force_login(alice)
    assert client.post(f"/api/v1/runs/{run.pk}/cancel").status_code == 200
    run_cancel(run_id=run.pk)  # what the worker's cancel_run task does
    run = drive(run, lambda r: r.is_terminal)
    assert (run.state, run.exit_code) == ("cancelled", 130), run.state_reason
    outcome = json.loads((Path(run.run_dir) / "signal.json").read_text())
    assert outcome["signal"] == "SIGINT" and outcome["cancelled"]


def test_the_time_limit_reaches_the_launcher_job_as_sigusr1(local_stack, alice, api_client):
    """The local backend's stop before a time limit (the cluster's "checkpoint and stop for
    requeue", trainer/cli.py): SIGUSR1, `grace` seconds before the limit of a launcher asking for 1 min."""
    local_stack.CANCEL_GRACE_SECONDS = 50  # the signal comes at max(limit - grace, 0.9 * limit) = 54 s
    launcher_upsert(by=None, data=tiny_sdk(resources={"cpus": 1, "mem_gb": 1, "time_limit_min": 1}))
    run = queue_run(api_client, alice, steps=100000, sleep=0.5)
    run = drive(run, lambda r: r.is_terminal, timeout=150)
    assert (run.state, run.exit_code) == ("failed", 75), run.state_reason
    assert run.state_reason == "time limit reached"
    outcome = json.loads((Path(run.run_dir) / "signal.json").read_text())
    assert outcome == {"signal": "SIGUSR1", "step": outcome["step"], "cancelled": False}
