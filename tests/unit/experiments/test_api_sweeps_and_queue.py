"""The JSON API beyond creation: preview, sweep ranges, run actions, listing, projects, OpenAPI."""

import json

import pytest

from orchestrator.experiments.models import Experiment, Run
from orchestrator.experiments.services import run_transition

pytestmark = pytest.mark.django_db


def post(client, url, body=None):
    return client.post(url, data=json.dumps(body or {}), content_type="application/json")


def patch(client, url, body):
    return client.patch(url, data=json.dumps(body), content_type="application/json")


@pytest.fixture
def sweep36(alice, api_client, tiny_config):
    body = {
        "name": "stale",
        "project": "lab",
        "config": tiny_config,
        "seeds": 3,
        "sweep": {"staleness.k": [0, 16, 64, 256], "algorithm.objective": ["grpo", "no_clip", "m2po"]},
    }
    response = post(api_client(alice), "/api/v1/experiments", body)
    assert response.status_code == 201, response.content
    return response.json()


def test_the_36_run_sweep_in_one_request(sweep36):
    assert set(sweep36) == {"id", "runs"} and len(sweep36["runs"]) == 36
    assert Run.objects.filter(pk__in=sweep36["runs"], state="queued").count() == 36


def test_preview_counts_and_names_without_creating(alice, api_client, tiny_config):
    body = {
        "name": "p",
        "config": tiny_config,
        "seeds": 2,
        "sweep": {"algorithm.lr": {"log": [1e-6, 1e-4, 3]}},
        "random": {"samples": 2, "seed": 1, "params": {"algorithm.tau_m2": {"uniform": [0.02, 0.08]}}},
    }
    response = post(api_client(alice), "/api/v1/experiments/preview", body)
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["count"] == 12 and len(data["runs"]) == 12
    assert data["runs"][0]["name"].startswith("lr1e-6-tau0.")
    assert Experiment.objects.count() == 0


def test_too_large_sweep_is_refused_with_its_count(alice, api_client, tiny_config, settings):
    settings.OPL_MAX_SWEEP_RUNS = 50
    response = post(
        api_client(alice),
        "/api/v1/experiments",
        {"name": "big", "config": tiny_config, "sweep": {"train.steps": list(range(1, 11))}, "seeds": 6},
    )
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"field": "sweep", "message": "expands to 60 runs, more than the maximum of 50"}
    ]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "bad name!"}, "name"),
        ({"name": "x", "seeds": 0}, "seeds"),
        ({"name": "x", "colour": "red"}, "colour"),
        ({"name": "x", "config": {"algorithm": {"lr": -1}}}, "config.algorithm.lr"),
        ({"name": "x", "config": {"algorithm": {"objectiv": "m2po"}}}, "config.algorithm.objectiv"),
        ({"name": "x", "sweep": {"staleness.k": {"linear": [0, 8]}}}, "sweep.staleness.k"),
        ({"name": "x", "random": {"samples": 0, "params": {"algorithm.lr": {"uniform": [0, 1]}}}}, "random.samples"),
        ({"name": "x", "tags": ["t" * 51]}, "tags"),
    ],
)
def test_every_invalid_value_names_its_field(alice, api_client, body, field):
    response = post(api_client(alice), "/api/v1/experiments", body)
    assert response.status_code == 400, response.content
    fields = [e["field"] for e in response.json()["errors"]]
    assert any(f.startswith(field) for f in fields), fields


def test_unknown_config_key_names_the_nearest(alice, api_client):
    response = post(
        api_client(alice), "/api/v1/experiments", {"name": "x", "config": {"algorithm": {"objectiv": "m2po"}}}
    )
    assert "did you mean 'objective'?" in response.json()["errors"][0]["message"]


def test_run_detail_has_state_and_backend_details(alice, api_client, sweep36):
    data = api_client(alice).get(f"/api/v1/runs/{sweep36['runs'][0]}").json()
    for key in ("state", "backend", "job_id", "node_list", "state_reason", "attempt", "priority", "gpus", "tags"):
        assert key in data
    assert data["state"] == "queued" and data["project"] == "lab"


def test_run_list_filters_with_the_query_language(alice, api_client, sweep36):
    response = api_client(alice).get(
        "/api/v1/runs", {"q": "algorithm.objective = m2po and staleness.k >= 64", "per_page": 5}
    )
    data = response.json()
    assert data["count"] == 6 and len(data["runs"]) == 5 and data["pages"] == 2
    bad = api_client(alice).get("/api/v1/runs", {"q": "staleness.kk = 1"})
    assert bad.status_code == 400 and "did you mean 'staleness.k'" in bad.json()["errors"][0]["message"]


def test_priority_retry_and_move_to_top(alice, api_client, sweep36):
    client = api_client(alice)
    first, last = sweep36["runs"][0], sweep36["runs"][-1]
    assert post(client, f"/api/v1/runs/{first}/priority", {"priority": 7}).json()["priority"] == 7
    assert post(client, f"/api/v1/runs/{first}/priority", {"priority": "high"}).status_code == 400
    assert post(client, f"/api/v1/runs/{last}/move-to-top").json()["priority"] == 7
    assert post(client, f"/api/v1/runs/{first}/retry").status_code == 409  # queued: nothing to retry
    run = Run.objects.get(pk=first)
    run_transition(run=run, to=Run.State.SUBMITTED)
    run_transition(run=run, to=Run.State.FAILED)
    assert post(client, f"/api/v1/runs/{first}/retry").json()["state"] == "queued"
    assert post(client, f"/api/v1/runs/{first}/explode").status_code == 404


def test_sweep_pause_resume_priority_cancel(alice, api_client, sweep36):
    client = api_client(alice)
    exp = sweep36["id"]
    assert post(client, f"/api/v1/experiments/{exp}/pause").json()["state"] == "paused"
    assert post(client, f"/api/v1/experiments/{exp}/pause").status_code == 409
    assert post(client, f"/api/v1/experiments/{exp}/resume").json()["state"] == "active"
    assert post(client, f"/api/v1/experiments/{exp}/priority", {"priority": 3}).json()["priority"] == 3
    assert set(Run.objects.filter(experiment_id=exp).values_list("priority", flat=True)) == {3}
    run = Run.objects.get(pk=sweep36["runs"][0])
    run_transition(run=run, to=Run.State.SUBMITTED)
    assert post(client, f"/api/v1/experiments/{exp}/cancel").json()["state"] == "cancelled"
    states = dict(Run.objects.filter(experiment_id=exp).values_list("id", "state"))
    assert list(states.values()).count("cancelled") == 35
    assert Run.objects.get(pk=run.pk).cancel_requested  # the running one is stopped through the cluster
    detail = client.get(f"/api/v1/experiments/{exp}").json()
    assert detail["runs_by_state"] == {"cancelled": 35, "submitted": 1}


def test_members_see_but_only_owners_change(alice, bob, charlie, api_client, sweep36):
    exp, run = sweep36["id"], sweep36["runs"][0]
    assert patch(api_client(alice), "/api/v1/projects/lab", {"add_members": ["bob"]}).status_code == 200
    assert post(api_client(bob), "/api/v1/projects/lab/invitation").status_code == 200  # bob accepts
    assert api_client(bob).get(f"/api/v1/experiments/{exp}").status_code == 200
    for url in (
        f"/api/v1/runs/{run}/cancel",
        f"/api/v1/runs/{run}/move-to-top",
        f"/api/v1/experiments/{exp}/pause",
        f"/api/v1/experiments/{exp}/cancel",
    ):
        assert post(api_client(bob), url).status_code == 403, url
    assert patch(api_client(bob), f"/api/v1/runs/{run}", {"notes": "mine"}).status_code == 403
    assert api_client(charlie).get(f"/api/v1/experiments/{exp}").status_code == 404
    assert api_client(charlie).get("/api/v1/runs").json()["count"] == 0
    assert Experiment.objects.get(pk=exp).state == "active"


def test_staff_can_change_any_run(alice, api_client, sweep36, django_user_model):
    admin = django_user_model.objects.create_user("admin", is_staff=True)
    assert post(api_client(admin), f"/api/v1/runs/{sweep36['runs'][0]}/cancel").json()["state"] == "cancelled"


def test_tags_notes_and_projects(alice, bob, api_client, sweep36):
    client = api_client(alice)
    run = sweep36["runs"][0]
    assert patch(client, f"/api/v1/runs/{run}", {"tags": ["keep"], "notes": "best"}).json()["tags"] == ["keep"]
    assert client.get("/api/v1/tags").json() == {"tags": ["keep"]}
    assert patch(client, f"/api/v1/runs/{run}", {"tags": ["x" * 80]}).json()["errors"][0]["field"].startswith("tags")
    assert client.get("/api/v1/runs", {"tag": "keep"}).json()["count"] == 1
    assert post(client, "/api/v1/projects", {"name": "new-lab"}).status_code == 201
    assert post(client, "/api/v1/projects", {"name": "new-lab"}).status_code == 409
    assert patch(client, "/api/v1/projects/new-lab", {"add_members": ["nobody"]}).status_code == 400
    assert patch(client, "/api/v1/projects/new-lab", {"max_gpus": 4}).status_code == 403  # staff only
    names = [p["name"] for p in client.get("/api/v1/projects").json()["projects"]]
    assert names == ["lab", "new-lab"]


def test_openapi_document_covers_the_api(client):
    doc = client.get("/api/v1/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    for path in (
        "/api/v1/experiments",
        "/api/v1/experiments/preview",
        "/api/v1/experiments/{experiment_id}/pause",
        "/api/v1/experiments/{experiment_id}/cancel",
        "/api/v1/runs",
        "/api/v1/runs/{run_id}",
        "/api/v1/runs/{run_id}/cancel",
        "/api/v1/runs/{run_id}/retry",
        "/api/v1/runs/{run_id}/priority",
        "/api/v1/runs/{run_id}/move-to-top",
        "/api/v1/projects",
        "/api/v1/tags",
        "/api/v1/runs/{run_id}/alerts",
        "/api/v1/projects/{name}/alerts",
    ):
        assert path in doc["paths"], path
    schemas = doc["components"]["schemas"]
    assert set(schemas["ExperimentIn"]["properties"]) >= {"name", "project", "config", "sweep", "seeds"}
    assert "AlgorithmConfig" in schemas and "RunConfig" in schemas
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    refs = {v for v in json.dumps(doc).split('"') if v.startswith("#/components/schemas/")}
    assert {r.rsplit("/", 1)[1] for r in refs} <= set(schemas)  # every reference resolves
