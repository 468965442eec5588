"""A W&B training script with one changed line (`import opl as wandb`, examples/tracking/
wandb_style.py) against a live dashboard (uvicorn on the test database): every point it logged is
read back under the key it was written with (spaces, brackets, <lambda>, %, #, non-ASCII, steps past
2^31), its config keeps its sections, its summary, alert, histogram and table arrive through the
updates endpoint, and exit code 1 ends the run failed."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import Run
from tests.integration.test_sdk_end_to_end import Dashboard, stored

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "tracking" / "wandb_style.py"
STEPS = 20


@pytest.fixture
def dashboard(tmp_path):
    dash = Dashboard(tmp_path / "uvicorn.log")
    dash.start()
    yield dash
    dash.stop()


def run_example(dashboard, token, tmp_path, *args) -> tuple[int, int, str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "OPL_URL": dashboard.url,
        "OPL_TOKEN": token,
        "OPL_DIR": str(tmp_path / "spools"),
    }
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", str(STEPS), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return answer["run"], answer["points"], done.stderr


def test_a_wandb_script_lands_whole_and_its_exit_code_ends_the_run(dashboard, alice, tmp_path):
    _, token = logging_token_create(user=alice)
    run_id, sent, stderr = run_example(dashboard, token, tmp_path, "--fail")
    assert not any(word in stderr for word in ("push failed", "not recorded", "refused")), stderr
    series = stored(run_id)
    read_back = sum(len(points) for points in series.values())
    print(f"W&B-style script: {sent} points sent, {read_back} read back")
    assert read_back == sent == 164
    tokens = 300_000_000
    assert [step for step, _ in series["#tokens"]] == [(i + 1) * tokens for i in range(STEPS)]
    for key in ("train/rewards/<lambda>/mean", "grpo-7b - train/kl", "Accuracy (val)", "loss [%]", "Genauigkeit/Übung"):
        assert len(series[key]) == STEPS, key
    assert all(not math.isnan(v) for points in series.values() for _, v in points)

    run = Run.objects.get(pk=run_id)
    assert (run.state, run.name, run.experiment.project.name) == ("failed", "grpo-7b", "wandb-style")
    assert run.config["optim"] == {"lr": 1e-5, "betas": [0.9, 0.95]} and run.config["model"]["layers"] == 28
    assert (run.config["steps"], run.config["group_size"]) == (STEPS, 8)

    browser = Client()
    browser.force_login(alice)
    detail = browser.get(f"/api/v1/runs/{run_id}").json()
    summary = detail["summary"]
    assert summary["best_reward"]["value"] > 0.8 and summary["final/tokens"]["value"] == STEPS * tokens
    # define_metric("eval/accuracy", summary="max"): the run's summary keeps the best, not the last
    assert summary["eval/accuracy"]["value"] == max(v for _, v in series["eval/accuracy"])
    alerts = browser.get(f"/api/v1/runs/{run_id}/alerts").json()
    assert any(a["message"].startswith("[warn] reward plateau: reward ") for a in alerts.get("alerts", alerts))
    histograms = browser.get(f"/api/v1/runs/{run_id}/histograms", {"key": "train/advantages"}).json()
    assert histograms and "counts" in json.dumps(histograms)
    tables = browser.get(f"/api/v1/runs/{run_id}/tables", {"key": "samples"}).json()
    assert "2+2=" in json.dumps(tables)
    assert not list((tmp_path / "spools").glob("*/metrics.rejected.jsonl"))
