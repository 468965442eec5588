"""The whole flow with real parts: API -> PostgreSQL -> Celery worker and beat on Redis -> local
backend -> trainer subprocess -> metrics pushed over HTTP into the live server -> succeeded."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from django.conf import settings

from orchestrator.experiments.models import Run
from orchestrator.metrics.chunks import live_rows

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def celery_worker(live_server, tmp_path):
    """A real worker with embedded beat, on the test database and a Redis db of its own."""
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        "SECRET_KEY": settings.SECRET_KEY,  # run tokens are derived from it
        "OPL_PUBLIC_URL": live_server.url,
        "OPL_VAR_DIR": str(tmp_path / "var"),
        "CLUSTER_BACKEND": "local",
    }
    subprocess.run(
        [sys.executable, "-m", "celery", "-A", "orchestrator", "purge", "-f"], env=env, check=True, capture_output=True
    )
    log = open(tmp_path / "worker.log", "wb")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "orchestrator",
            "worker",
            "-B",
            "--pool=solo",
            "--loglevel=INFO",
            "-s",
            str(tmp_path / "beat-schedule"),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    yield tmp_path
    os.killpg(worker.pid, signal.SIGTERM)
    worker.wait(timeout=30)
    log.close()


def test_experiment_created_through_the_api_trains_and_succeeds(celery_worker, alice, api_client, tiny_config):
    response = api_client(alice).post(
        "/api/v1/experiments", data=json.dumps({"name": "e2e", "config": tiny_config}), content_type="application/json"
    )
    assert response.status_code == 201, response.content
    run_id = response.json()["runs"][0]

    deadline = time.monotonic() + 300
    run = Run.objects.get(pk=run_id)
    while not run.is_terminal and time.monotonic() < deadline:
        time.sleep(1)
        run.refresh_from_db()
    worker_log = (celery_worker / "worker.log").read_text(errors="replace")[-3000:]
    assert run.state == "succeeded", f"{run.state}: {run.state_reason}\n{worker_log}"

    history = list(run.events.values_list("to_state", flat=True))
    assert history == ["submitted", "pending", "running", "succeeded"], history
    reward_steps = {step for step, _, _ in live_rows(run.pk, "train/reward_mean")}
    assert len(reward_steps) >= 3, reward_steps
    assert run.job_id and run.attempt == 1 and run.exit_code == 0
