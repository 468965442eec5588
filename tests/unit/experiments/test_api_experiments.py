import json

import pytest

from orchestrator.experiments.models import Run

pytestmark = pytest.mark.django_db


def post_json(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def test_create_experiment_returns_queued_runs(alice, api_client, tiny_config):
    response = post_json(
        api_client(alice),
        "/api/v1/experiments",
        {
            "name": "exp",
            "project": "lab",
            "config": tiny_config,
            "sweep": {"algorithm.objective": ["grpo", "m2po"]},
            "seeds": 2,
        },
    )
    assert response.status_code == 201, response.content
    body = response.json()
    runs = Run.objects.filter(pk__in=body["runs"]).order_by("id")
    assert len(body["runs"]) == 4
    assert {r.state for r in runs} == {"queued"}
    assert sorted((r.config["algorithm"]["objective"], r.config["train"]["seed"]) for r in runs) == [
        ("grpo", 1),
        ("grpo", 2),
        ("m2po", 1),
        ("m2po", 2),
    ]


def test_invalid_config_is_refused_naming_the_field(alice, api_client, tiny_config):
    tiny_config["algorithm"]["objective"] = "ppo-magic"
    response = post_json(api_client(alice), "/api/v1/experiments", {"name": "exp", "config": tiny_config})
    assert response.status_code == 400
    fields = [e["field"] for e in response.json()["errors"]]
    assert fields == ["config.algorithm.objective"]
    assert Run.objects.count() == 0


def test_invalid_sweep_value_creates_nothing(alice, api_client, tiny_config):
    response = post_json(
        api_client(alice),
        "/api/v1/experiments",
        {"name": "exp", "config": tiny_config, "sweep": {"staleness.k": [1, -3]}},
    )
    assert response.status_code == 400
    assert "staleness.k" in response.json()["errors"][0]["field"]
    assert Run.objects.count() == 0


def test_api_requires_authentication(client, tiny_config):
    response = post_json(client, "/api/v1/experiments", {"name": "exp", "config": tiny_config})
    assert response.status_code == 401


def test_unknown_run_is_404_json(alice, api_client):
    response = api_client(alice).get("/api/v1/runs/999999")
    assert response.status_code == 404
    assert "999999" in response.json()["error"]


def test_outsider_cannot_see_and_member_cannot_cancel(alice, bob, charlie, api_client, tiny_config):
    run_id = post_json(
        api_client(alice), "/api/v1/experiments", {"name": "exp", "project": "lab", "config": tiny_config}
    ).json()["runs"][0]
    Run.objects.get(pk=run_id).experiment.project.members.add(bob)
    assert api_client(charlie).get(f"/api/v1/runs/{run_id}").status_code == 404
    assert api_client(bob).get(f"/api/v1/runs/{run_id}").status_code == 200
    assert api_client(bob).post(f"/api/v1/runs/{run_id}/cancel").status_code == 403
    assert Run.objects.get(pk=run_id).state == "queued"
    assert api_client(alice).post(f"/api/v1/runs/{run_id}/cancel").status_code == 200
    assert Run.objects.get(pk=run_id).state == "cancelled"


def test_session_post_without_csrf_token_is_refused(alice, tiny_config):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = post_json(client, "/api/v1/experiments", {"name": "exp", "config": tiny_config})
    assert response.status_code == 403
