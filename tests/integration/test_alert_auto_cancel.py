"""Auto-cancel with real parts: a tiny CPU run on the local backend pushes its metrics over HTTP
into the live server; a run rule (entropy under a floor it can never reach) fires on the first
stored batch with actor/entropy. Its action `stop` cancels the run after a checkpoint at its last
update; `cancel` stops it without one (the trainer reads the alert's marker).

The cancel task that the alert enqueues is not consumed here (no Celery worker runs); the beat
sync's re-send of a requested cancel (sync_active_runs -> resend_cancels) delivers it, as it
does in production when the worker is down. The run's system/... metrics are checked to have
arrived through the same ingestion path."""

import time

import pytest

from orchestrator.alerts.models import Alert
from orchestrator.alerts.services import alert_rule_set
from orchestrator.cluster.jobspec import run_dir_for
from orchestrator.cluster.services import run_submit, sync_active_runs
from orchestrator.experiments.services import experiment_create
from orchestrator.metrics import selectors
from trainer.ckpt import checkpoint as ckpt

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("action", ["stop", "cancel"])
def test_an_alert_with_auto_cancel_stops_a_real_run(settings, tmp_path, live_server, alice, tiny_config, action):
    settings.RUNS_DIR = tmp_path / "runs"
    settings.LOCAL_JOBS_DIR = tmp_path / "jobs"
    settings.PUBLIC_URL = live_server.url
    tiny_config.update(
        {
            "train": {"steps": 400, "seed": 1, "device": "cpu", "torch_threads": 1},  # far longer than the test waits
            "checkpoint": {"every": 0},
            "reporting": {"push_interval_s": 0.5},
        }
    )
    run = experiment_create(owner=alice, name="doomed", config=tiny_config).runs.get()
    alert_rule_set(run=run, kind="entropy_floor", threshold=100.0, action=action)  # 100 nats: always under
    run_submit(run_id=run.pk, backend_name="local")

    deadline = time.monotonic() + 240
    while not run.is_terminal and time.monotonic() < deadline:
        time.sleep(1)
        sync_active_runs("local")
        run.refresh_from_db()
    logs = "\n".join(p.read_text()[-2000:] for p in (run_dir_for(run) / "logs").glob("*"))
    assert run.state == "cancelled", f"{run.state}: {run.state_reason}\n{logs}"
    alert = Alert.objects.get(run=run, kind="entropy_floor")  # a default rule (notify) may fire too
    assert alert.action_result.startswith(f"{action} requested")
    assert run.exit_code == 130 and run.step < 400 * 2  # stopped early, as a person's cancel
    kept = ckpt.list_checkpoints(run_dir_for(run))
    if action == "stop":
        assert [ckpt.checkpoint_step(c) for c in kept] == [run.step], "stop: a checkpoint at the last update"
    else:
        assert kept == [], "cancel: no checkpoint of weights an alert judged broken"
    # the same run's system metrics came through the ordinary ingestion path (the System panels)
    assert {"system/cpu_pct", "system/ram_gb", "system/host_cpu_pct"} <= set(selectors.run_keys(run.pk))
