"""`pip install ./client` into a bare virtualenv, then a plain script with `import opl` logs a run
that the dashboard shows like a bundled one. The dashboard is a real uvicorn process on
the test database; the test kills it (SIGKILL) while the script logs, starts it again, and reads
every point back: nothing is lost, the run ends succeeded, its page, the compare page, its
summaries and its alerts work as for a bundled run. An offline spool uploaded with `opl sync`
arrives the same way, and a second sync adds nothing."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client

from orchestrator.alerts.models import Alert
from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.chunks import live_series
from orchestrator.metrics.summaries import run_summaries

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
REPO = Path(__file__).resolve().parents[2]
KEYS = [f"actor/k{i:02d}" for i in range(38)] + ["train/reward_mean", "actor/pg_loss"]
STEPS = 300

SCRIPT = """
import json, math, sys, time
import opl

try:
    import django  # noqa: F401
    raise SystemExit("the bare venv has django")
except ImportError:
    pass
KEYS, STEPS, spool, mode = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
config = {"actor_rollout_ref": {"actor": {"clip_ratio": 0.2}}, "staleness": 4, "seed": 1}
with opl.init(project="lab", name="verl-like", config=config, dir=spool, mode=mode, push_interval_s=0.2,
              heartbeat_s=1, flush_timeout_s=60) as run:
    print(json.dumps({"id": run.id}), flush=True)
    for step in range(STEPS):
        values = {key: step * 0.001 + i for i, key in enumerate(KEYS)}
        values["train/reward_mean"] = min(1.0, step / 100)
        values["actor/pg_loss"] = math.nan if step == 150 else 0.1
        run.log(values, step=step)
        time.sleep(0.01)
    run.log_samples([{"prompt": "1+1=", "response": "2", "reward": 1.0, "correct": True}])
"""


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """A virtualenv with nothing but the client installed from ./client (pip, the local mirror)."""
    venv = tmp_path_factory.mktemp("bare-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", str(REPO / "client")],
        check=True,
        timeout=300,
        capture_output=True,
    )
    return venv / "bin" / "python"


class Dashboard:
    """uvicorn serving the project on the test database, in a process of its own that can be killed."""

    def __init__(self, log_path: Path):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        db = connection.settings_dict
        self.env = {
            **os.environ,
            "DATABASE_URL": f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "PYTHONPATH": str(REPO),
            "OPL_PUBLIC_URL": self.url,
        }
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "uvicorn", "orchestrator.asgi:application", "--port", str(self.port)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, cwd=REPO, env=self.env, stdout=log, stderr=log)
        wait_for(lambda: _answers(self.url), 60, "the dashboard to answer")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def _answers(url: str) -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(f"{url}/login/", timeout=1).close()
        return True
    except OSError:
        return False


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture
def dashboard(tmp_path):
    dash = Dashboard(tmp_path / "uvicorn.log")
    dash.start()
    yield dash
    dash.stop()


def spooled(spool: Path) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for line in (spool / "metrics.jsonl").read_text().splitlines():
        p = json.loads(line)
        out.setdefault(p["key"], []).append((p["step"], float(p["value"])))
    return out


def stored(run_id: int) -> dict[str, list[tuple[int, float]]]:
    return {
        key: list(zip(points.steps.tolist(), points.values.tolist(), strict=True))
        for key, points in live_series(run_id).items()
    }


def same(a: dict, b: dict) -> bool:
    """Point by point, NaN equal to NaN."""
    return a.keys() == b.keys() and all(
        len(a[k]) == len(b[k])
        and all(sa == sb and (va == vb or va != va and vb != vb) for (sa, va), (sb, vb) in zip(a[k], b[k], strict=True))
        for k in a
    )


def test_a_script_logs_through_a_dashboard_that_dies_and_nothing_is_lost(
    bare_python, dashboard, alice, tiny_config, tmp_path
):
    _, token = logging_token_create(user=alice)
    spool = tmp_path / "spool"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPL_URL": dashboard.url, "OPL_TOKEN": token}
    script = subprocess.Popen(
        [str(bare_python), "-c", SCRIPT, json.dumps(KEYS), str(STEPS), str(spool), "online"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run_id = json.loads(script.stdout.readline())["id"]
    wait_for(
        lambda: (
            json.loads((spool / "metrics.pushed.json").read_text())["offset"] > 0
            if (spool / "metrics.pushed.json").exists()
            else False
        ),
        60,
        "a first push",
    )
    dashboard.kill()
    time.sleep(2.0)  # the script logs on while the dashboard is down
    assert script.poll() is None, "the script still runs"
    dashboard.start()
    _, err = script.communicate(timeout=180)
    assert script.returncode == 0, err
    assert "push failed" in err  # it did meet the dead dashboard

    logged = spooled(spool)
    assert len(logged) == len(KEYS) and all(len(v) == STEPS for v in logged.values())
    assert same(stored(run_id), logged)
    run = Run.objects.get(pk=run_id)
    assert (run.state, run.exit_code, run.owner, run.config["staleness"]) == ("succeeded", 0, alice, 4)

    # as the dashboard shows a bundled run: its page, the compare page, summaries, alerts
    bundled = experiment_create(owner=alice, name="bundled", config=tiny_config, project="lab").runs.get()
    browser = Client()
    browser.force_login(alice)
    page = browser.get(f"/runs/{run_id}/")
    assert page.status_code == 200 and b"verl-like" in page.content
    assert browser.get(f"/compare/?runs={run_id},{bundled.pk}").status_code == 200
    series = browser.get(f"/api/v1/metrics/compare?runs={run_id},{bundled.pk}&key=train/reward_mean")
    assert series.status_code == 200
    summary = run_summaries([run_id], ["train/reward_mean"])[run_id]["train/reward_mean"]
    assert (summary["last"], summary["max"], summary["count"], summary["last_step"]) == (1.0, 1.0, STEPS, STEPS - 1)
    alert = Alert.objects.get(run_id=run_id, kind="nonfinite")
    assert alert.step == 150
    samples = browser.get(f"/api/v1/runs/{run_id}/samples")
    assert samples.status_code == 200 and samples.json()["samples"][0]["response"] == "2"


def test_an_offline_spool_arrives_with_opl_sync_and_a_second_sync_adds_nothing(bare_python, dashboard, alice, tmp_path):
    _, token = logging_token_create(user=alice)
    spool = tmp_path / "offline"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPL_URL": "http://127.0.0.1:9", "OPL_TOKEN": token}
    done = subprocess.run(
        [str(bare_python), "-c", SCRIPT, json.dumps(KEYS[-5:]), "50", str(spool), "offline"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["id"] is None and Run.objects.count() == 0  # offline: no run yet
    opl = bare_python.parent / "opl"
    env["OPL_URL"] = dashboard.url
    first = subprocess.run([str(opl), "sync", str(tmp_path)], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    run = Run.objects.get()
    assert "finished" in first.stdout and run.state == "succeeded"
    assert same(stored(run.pk), spooled(spool))
    second = subprocess.run([str(opl), "sync", str(spool)], env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0 and f"run {run.pk} complete" in second.stdout
    assert Run.objects.count() == 1 and same(stored(run.pk), spooled(spool))


def test_a_dashboard_down_when_the_script_starts_gets_the_whole_run_once_it_is_back(
    bare_python, dashboard, alice, tmp_path
):
    _, token = logging_token_create(user=alice)
    spool = tmp_path / "late"
    dashboard.kill()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "OPL_URL": dashboard.url, "OPL_TOKEN": token}
    script = subprocess.Popen(
        [str(bare_python), "-c", SCRIPT, json.dumps(KEYS[-4:]), "200", str(spool), "online"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert json.loads(script.stdout.readline())["id"] is None  # training starts without a run
    dashboard.start()
    _, err = script.communicate(timeout=180)
    assert script.returncode == 0, err
    assert "cannot be reached" in err and "opened at" in err
    run = Run.objects.get()
    assert (run.state, run.name) == ("succeeded", "verl-like")
    assert same(stored(run.pk), spooled(spool)) and len(stored(run.pk)["train/reward_mean"]) == 200
