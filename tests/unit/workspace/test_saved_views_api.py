"""Saved views through the JSON API, as the `opl views` client and the pages use it: create, list,
get, update, delete; one default per project; bad fields named; other projects' views are 404."""

import json

import pytest

from orchestrator.experiments.models import Membership
from orchestrator.experiments.services import experiment_create

STATE = {
    "panels": [
        {"id": "reward", "keys": ["train/reward_mean"]},
        {
            "id": "k-actor-pg_loss",
            "title": "pg loss and ratio",
            "keys": ["actor/pg_loss", "actor/ratio_max"],
            "log_y": True,
            "x": "tokens",
        },
    ],
    "smooth": 0.6,
    "group": "staleness.k",
}


@pytest.fixture
def lab(alice, bob, charlie, tiny_config):
    experiment = experiment_create(owner=alice, name="e", project="lab", config=tiny_config)
    experiment.project.members.add(bob)
    experiment.project.members.add(charlie, through_defaults={"role": Membership.Role.VIEWER})
    return experiment


def send(client, method, path, body=None):
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json")


def test_a_view_round_trips_and_members_share_it(api_client, alice, bob, lab):
    owner, member = api_client(alice), api_client(bob)
    created = send(owner, "post", "/api/v1/projects/lab/views", {"name": "pg-loss", "state": STATE, "page": "compare"})
    assert created.status_code == 201, created.content
    view = created.json()
    assert view["state"]["panels"][1] == STATE["panels"][1]
    assert view["state"]["filters"] == {"band": "minmax", "individual": False, "hidden": []}  # defaults filled
    assert member.get(f"/api/v1/views/{view['id']}").json()["state"] == view["state"]
    assert [v["name"] for v in member.get("/api/v1/projects/lab/views").json()["views"]] == ["pg-loss"]
    renamed = send(owner, "patch", f"/api/v1/views/{view['id']}", {"name": "pg", "default": True})
    assert renamed.status_code == 200 and renamed.json()["name"] == "pg" and renamed.json()["default"]
    assert renamed.json()["state"] == view["state"]  # untouched fields stay
    assert owner.delete(f"/api/v1/views/{view['id']}").status_code == 200
    assert owner.get(f"/api/v1/views/{view['id']}").status_code == 404


def test_one_default_per_project(api_client, alice, lab):
    owner = api_client(alice)
    first = send(owner, "post", "/api/v1/projects/lab/views", {"name": "a", "default": True}).json()
    second = send(owner, "post", "/api/v1/projects/lab/views", {"name": "b", "default": True}).json()
    assert owner.get(f"/api/v1/views/{first['id']}").json()["default"] is False
    assert owner.get(f"/api/v1/views/{second['id']}").json()["default"] is True


@pytest.mark.parametrize(
    "body,field",
    [
        ({"name": "bad name/"}, "name"),
        ({"name": "v", "state": {"smooth": 1.5}}, "state.smooth"),
        ({"name": "v", "state": {"panels": [{"id": "p", "keys": ["not\ta key"]}]}}, "state.panels.0.keys.0"),
        ({"name": "v", "state": {"panels": [{"id": "p", "keys": []}]}}, "state.panels.0.keys"),
        ({"name": "v", "state": {"x": "furlongs"}}, "state.x"),
        ({"name": "v", "state": {"runs": [0]}}, "state.runs.0"),
        ({"name": "v", "state": {"colour": "red"}}, "state.colour"),
        ({"name": "v", "page": "../admin"}, "page"),
    ],
)
def test_bad_fields_are_named(api_client, alice, lab, body, field):
    answer = send(api_client(alice), "post", "/api/v1/projects/lab/views", body)
    assert answer.status_code == 400
    assert field in [e["field"] for e in answer.json()["errors"]], answer.json()


def test_a_taken_name_is_a_409_naming_the_field(api_client, alice, lab):
    owner = api_client(alice)
    send(owner, "post", "/api/v1/projects/lab/views", {"name": "v"})
    answer = send(owner, "post", "/api/v1/projects/lab/views", {"name": "v"})
    assert answer.status_code == 409 and answer.json()["errors"][0]["field"] == "name"


def test_viewers_read_but_do_not_write_and_outsiders_see_nothing(api_client, alice, charlie, lab, db):
    from django.contrib.auth.models import User

    view = send(api_client(alice), "post", "/api/v1/projects/lab/views", {"name": "v"}).json()
    viewer = api_client(charlie)
    assert viewer.get(f"/api/v1/views/{view['id']}").status_code == 200
    assert send(viewer, "patch", f"/api/v1/views/{view['id']}", {"name": "w"}).status_code == 403
    assert send(viewer, "post", "/api/v1/projects/lab/views", {"name": "w"}).status_code == 403
    outsider = api_client(User.objects.create_user("dave"))
    assert outsider.get(f"/api/v1/views/{view['id']}").status_code == 404
    assert outsider.get("/api/v1/projects/lab/views").status_code == 404
    assert outsider.delete(f"/api/v1/views/{view['id']}").status_code == 404
