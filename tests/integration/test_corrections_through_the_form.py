"""Each correction goes from YAML through the form to a succeeded run with its
panels. A user pastes the YAML of a tiny CPU run into the new-experiment form and queues it; the
Celery worker runs it on the local backend, the trainer pushes its metrics into the live server,
and the run page shows the Corrections panels with the option's own line, drawn from keys the run
really logged. The configs are the trainer-side correction runs' (tests/integration/trainer/
test_corrections_run.py), so the option acts in each run."""

import json
import re
import time

import pytest
import yaml

from orchestrator.experiments.models import Run
from orchestrator.metrics.panels import CORRECTIONS
from tests.integration.test_end_to_end import celery_worker  # noqa: F401 (fixture)
from tests.integration.trainer.test_corrections_run import BASE, RUNS

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def pasted_config(algorithm: dict) -> dict:
    config = {section: dict(values) for section, values in BASE.items()}
    config["samples"] = {"every": 1, "per_step": 4}
    config["algorithm"] = {"updates_per_step": 1, "epochs": 2, "lr": 5e-2, **algorithm}
    if algorithm["objective"] == "grpo":
        config["train"]["micro_batch_size"] = 8
    return config


def run_page_config(client, run: Run) -> dict:
    page = client.get(f"/runs/{run.pk}/")
    assert page.status_code == 200
    found = re.search(
        r'<script id="run-metrics-config" type="application/json">(.*?)</script>', page.content.decode(), re.S
    )
    return json.loads(found[1])


def test_each_correction_queued_from_the_form_succeeds_with_its_panels(celery_worker, client, alice):  # noqa: F811
    client.force_login(alice)
    queued = {}
    for label, (algorithm, own_stat) in RUNS.items():
        config = pasted_config(algorithm)
        name = re.sub(r"[^a-z0-9]+", "-", label)
        answer = client.post("/experiments/new/", {"name": name, "project": "", "config_yaml": yaml.safe_dump(config)})
        assert answer.status_code == 302, answer.content.decode()[-3000:]
        run = Run.objects.get(experiment__name=name)
        sent = {k: v for k, v in run.config["algorithm"].items() if k in config["algorithm"]}
        assert sent == config["algorithm"], "the form queued another config than the pasted one"
        queued[label] = (run, own_stat)

    deadline = time.monotonic() + 420
    while time.monotonic() < deadline and not all(r.is_terminal for r, _ in queued.values()):
        time.sleep(2)
        for run, _ in queued.values():
            run.refresh_from_db()
    log = (celery_worker / "worker.log").read_text(errors="replace")[-3000:]
    assert {label: run.state for label, (run, _) in queued.items()} == dict.fromkeys(queued, "succeeded"), log

    for label, (run, own_stat) in queued.items():
        page = run_page_config(client, run)
        corrections = {p["id"]: p for p in page["panels"] if p.get("group") == CORRECTIONS}
        assert {"neg_tail", "top_share", "corrections_frac", "divergence", "ess"} <= set(corrections), label
        fractions = corrections["corrections_frac"]
        assert fractions["title"] == f"Tokens each correction acts on ({label})"
        assert own_stat in fractions["keys"] or own_stat == "actor/reweighted_frac", (label, fractions["keys"])
        logged = set(page["keys"])
        assert own_stat in logged and set(corrections["neg_tail"]["keys"]) <= logged, label
        points = client.get(f"/api/v1/runs/{run.pk}/metrics", {"key": own_stat}).json()["points"]
        assert max(value for _, value in points) > 0, f"{label}: the option should act in this run"
        if "sq_penalty" in label:
            assert "sq_penalty" in corrections
        if "dual_clip" in label:
            assert [line["y"] for line in corrections["neg_tail"]["lines"]] == [RUNS[label][0]["dual_clip_c"]]
