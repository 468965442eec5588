"""`opl import` derives its run's client id from the format, the file's absolute path, the project
and the name, so anyone can compute it. Ids are each user's own: another user who opens a run
with that id first gets a run of their own, and the real import still creates the importer's."""

import hashlib
import io
import json

import pytest
from django.test import Client

from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import ExternalRun
from orchestrator.metrics.chunks import live_series
from tests.unit.metrics.asgi_server import serve_asgi

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_an_import_id_opened_first_by_another_user_does_not_stop_the_import(alice, bob, tmp_path, monkeypatch):
    from opl_client import cli

    monkeypatch.setenv("OPL_IMPORT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OPL_CONFIG", str(tmp_path / "no-config"))
    history = tmp_path / "metrics.jsonl"
    history.write_text("".join(json.dumps({"step": s, "train/loss": 1 / (s + 1)}) + "\n" for s in range(5)))
    predicted = "import-" + hashlib.sha256(f"jsonl\0{history}\0lab\0mine".encode()).hexdigest()[:40]
    _, bobs = logging_token_create(user=bob)
    body = {"client_id": predicted, "name": "squat", "project": "bobs-lab"}
    taken = Client().post(
        "/api/v1/sdk/runs", json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {bobs}"
    )
    assert taken.status_code == 201

    _, alices = logging_token_create(user=alice)
    with serve_asgi() as url:
        out = io.StringIO()
        code = cli.main(
            ["--url", url, "--token", alices, "import", str(history), "--project", "lab", "--name", "mine"], out=out
        )
    assert code == 0, out.getvalue()
    run = ExternalRun.objects.select_related("run__experiment__project").get(owner=alice, client_id=predicted).run
    assert (run.owner, run.experiment.project.name, run.state) == (alice, "lab", "succeeded")
    loss = live_series(run.pk)["train/loss"]
    assert list(zip(loss.steps.tolist(), loss.values.tolist(), strict=True)) == [(s, 1 / (s + 1)) for s in range(5)]
    assert ExternalRun.objects.get(owner=bob, client_id=predicted).run.name == "squat"  # bob's own, untouched
