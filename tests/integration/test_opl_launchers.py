"""`opl launchers` against a running server: the enabled launchers listed with their parameters, a
run queued with values typed on the command line (the server types them as the form does), and a
bad value refused naming params.<name>, with nothing queued."""

import json

import pytest
from django.contrib.auth.models import User

from orchestrator.accounts.services import api_token_create
from orchestrator.experiments.models import Run
from orchestrator.launchers.services import launcher_upsert
from tests.integration.opl_shell import opl
from tests.unit.launchers.helpers import tiny_sdk

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_launchers_from_the_shell(monkeypatch, live_server, alice, tmp_path, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    staff = User.objects.create_user("sam", password="sam-pass-123", is_staff=True)
    launcher_upsert(by=staff, data=tiny_sdk())
    token = api_token_create(user=alice, name="cli")

    code, out = opl(monkeypatch, live_server.url, token, "launchers", "list")
    assert code == 0 and out.startswith("tiny-sdk: ")
    assert "    steps (int; default 5; min 1; max 100000): training steps" in out.splitlines()
    code, out = opl(monkeypatch, live_server.url, token, "launchers", "list", "--json")
    assert [p["name"] for p in json.loads(out)[0]["parameters"]] == ["steps", "lr", "sleep", "note"]

    code, out = opl(
        monkeypatch, live_server.url, token, "launchers", "run", "tiny-sdk", "-p", "steps=7", "-p", "lr=0.5",
        "--name", "from-shell", "--tag", "cli",
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    run = Run.objects.get(pk=int(out.split()[1]))
    assert (run.name, run.state, run.owner) == ("from-shell", "queued", alice)
    assert [t.name for t in run.tags.all()] == ["cli"]
    assert run.config["launcher"]["params"] == {"steps": 7, "lr": 0.5, "sleep": 0.2, "note": "none"}

    code, _ = opl(monkeypatch, live_server.url, token, "launchers", "run", "tiny-sdk", "-p", "steps=0")
    assert code == 1 and "params.steps" in capsys.readouterr().err
    code, _ = opl(monkeypatch, live_server.url, token, "launchers", "run", "tiny-sdk", "-p", "steps")
    assert code == 1 and "expected PARAM=VALUE" in capsys.readouterr().err
    code, _ = opl(monkeypatch, live_server.url, token, "launchers", "run", "nope")
    assert code == 1 and "HTTP 404" in capsys.readouterr().err
    assert Run.objects.count() == 1
