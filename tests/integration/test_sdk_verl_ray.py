"""verl 0.9.1's own Tracking, built inside Ray actors on a local CPU Ray cluster, with
trainer.logger=['console','opl'] and nothing registered by hand: verl finds the "opl" backend
through the client's `verl.plugins` entry point. Each run ends with verl's exit status (the crashed
one failed), every point is on the live dashboard (uvicorn) and the spool holds nothing unsent.
verl needs transformers<5.11, so it runs in .venv-verl (`make verl-venv`), with the client
installed into it."""

import json
import math
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import Run
from orchestrator.metrics.offpolicy_keys import PRODUCT_KEYS, aliases
from tests.integration.test_sdk_end_to_end import Dashboard, stored

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
REPO = Path(__file__).resolve().parents[2]
VERL_PYTHON = REPO / ".venv-verl" / "bin" / "python"


@pytest.fixture
def dashboard(tmp_path):
    dash = Dashboard(tmp_path / "uvicorn.log")
    dash.start()
    yield dash
    dash.stop()


def test_verls_tracking_inside_a_ray_actor_logs_to_opl_and_ends_with_verls_exit_status(dashboard, alice, tmp_path):
    from opl_client.sdk import pending_bytes

    assert VERL_PYTHON.exists(), "verl's virtualenv is missing: make verl-venv"
    _, token = logging_token_create(user=alice)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "OPL_URL": dashboard.url,
        "OPL_TOKEN": token,
        "OPL_DIR": str(tmp_path / "spools"),
        "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray", dir="/tmp"),  # Ray's socket paths must stay short
        "RAY_USAGE_STATS_ENABLED": "0",
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        [str(VERL_PYTHON), str(REPO / "tests/integration/verl_ray_driver.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])["runs"]
    for name, state in (("verl-v1", "failed"), ("verl-v0", "succeeded")):
        logged = runs[name]
        run = Run.objects.get(pk=logged["id"])
        series = stored(run.pk)
        # verl's off-policy keys are also stored under the product's (docs/OFF_POLICY_KEYS.md): the
        # mirrors hold the same points and are not counted as points read back
        mirrored = aliases(set(series) - PRODUCT_KEYS)
        assert "actor/pg_clipfrac" in mirrored
        assert all(series[product] == series[source] for source, product in mirrored.items())
        read_back = sum(len(points) for key, points in series.items() if key not in mirrored.values())
        print(f"verl {name}: {logged['sent']} points sent, {read_back} read back")
        assert (run.name, run.state, run.experiment.project.name) == (name, state, "verl-lab")
        assert read_back == logged["sent"] == 15
        assert run.config["algorithm"]["adv_estimator"] == "grpo"
        assert series["actor/pg_loss"] == [(1, 0.1), (2, 0.2), (3, 0.1 * 3)]
        assert math.isnan(series["critic/score/mean"][1][1])
        assert pending_bytes(Path(logged["dir"])) == 0
