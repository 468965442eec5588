"""`opl views` against a running server: a view saved from a JSON file, listed, shown,
made the project's default, its link printed and followed, deleted; a bad state names the field;
a user outside the project gets the server's 404."""

import json

import pytest

from orchestrator.accounts.services import api_token_create
from orchestrator.experiments.services import experiment_create
from tests.integration.opl_shell import opl

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
STATE = {
    "panels": [{"id": "k-actor_pg_loss", "keys": ["actor/pg_loss", "actor/ratio_max"], "log_y": True}],
    "smooth": 0.5,
}


def test_views_from_the_shell(monkeypatch, live_server, alice, charlie, tiny_config, tmp_path, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    experiment = experiment_create(owner=alice, name="e", project="lab", config=tiny_config)
    token = api_token_create(user=alice, name="cli")
    state = tmp_path / "view.json"
    state.write_text(json.dumps(STATE))

    code, out = opl(
        monkeypatch, live_server.url, token, "views", "create", "lab", "pg", "--state", state, "--page", "compare"
    )
    assert code == 0 and out.startswith("view ") and f"{live_server.url}/views/" in out
    view_id = int(out.split()[1])
    code, out = opl(monkeypatch, live_server.url, token, "views", "list", "lab")
    assert code == 0 and out.splitlines()[1].split()[:3] == [str(view_id), "pg", "1"]
    code, out = opl(monkeypatch, live_server.url, token, "views", "show", view_id)
    assert json.loads(out)["state"]["panels"][0]["keys"] == ["actor/pg_loss", "actor/ratio_max"]

    assert opl(monkeypatch, live_server.url, token, "views", "update", view_id, "--default")[0] == 0
    code, out = opl(monkeypatch, live_server.url, token, "views", "list", "lab", "--json")
    assert json.loads(out)[0]["default"] is True
    code, url = opl(monkeypatch, live_server.url, token, "views", "url", view_id)
    assert url.strip() == f"{live_server.url}/views/{view_id}/"

    state.write_text(json.dumps({"smooth": 2}))
    code, _ = opl(monkeypatch, live_server.url, token, "views", "update", view_id, "--state", state)
    assert code == 1 and "state.smooth" in capsys.readouterr().err

    other = api_token_create(user=charlie, name="cli")
    code, _ = opl(monkeypatch, live_server.url, other, "views", "show", view_id)
    assert code == 1 and "HTTP 404" in capsys.readouterr().err

    code, out = opl(monkeypatch, live_server.url, token, "views", "delete", view_id)
    assert code == 0 and out == f"view {view_id} deleted\n"
    assert opl(monkeypatch, live_server.url, token, "views", "list", "lab")[1].splitlines() == [
        "id  name  panels  page  default  owner"
    ]
    assert experiment.project.saved_views.count() == 0
