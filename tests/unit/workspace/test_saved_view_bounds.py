"""Saved views are bounded and each is its author's: a view's size and a project's count of views
come from settings and are refused with a 400 naming the field; the project's list answers
summaries, the state comes one view at a time; only the author or a project owner changes or
deletes a view, and only owners choose the project's default (applied to every run page)."""

import json

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.workspace.models import SavedView

LIST = "/api/v1/projects/lab/views"
# 300 panels of 20 keys each: about 1 MB as JSON, valid by the schema
HUGE = {
    "panels": [
        {"id": f"p{i}", "title": "t" * 200, "keys": [f"custom/{'m' * 150}_{i}_{k}" for k in range(20)]}
        for i in range(300)
    ]
}


@pytest.fixture
def lab(alice, bob, tiny_config):
    experiment = experiment_create(owner=alice, name="e", project="lab", config=tiny_config)
    experiment.project.members.add(bob)  # a member; alice owns the project
    return experiment.project


def send(client, method, path, body=None):
    return getattr(client, method)(path, data=json.dumps(body), content_type="application/json")


def field_of(answer) -> str:
    return answer.json()["errors"][0]["field"]


def test_a_megabyte_view_is_refused_naming_the_state_and_its_setting(api_client, alice, lab, settings):
    assert len(json.dumps(HUGE)) > 1_000_000
    owner = api_client(alice)
    answer = send(owner, "post", LIST, {"name": "huge", "state": HUGE})
    assert answer.status_code == 400 and field_of(answer) == "state"
    assert "OPL_VIEW_MAX_BYTES" in answer.json()["error"]
    small = send(owner, "post", LIST, {"name": "small", "state": {"panels": HUGE["panels"][:3]}})
    assert small.status_code == 201
    grown = send(owner, "patch", f"/api/v1/views/{small.json()['id']}", {"state": HUGE})
    assert grown.status_code == 400 and field_of(grown) == "state"
    assert len(SavedView.objects.get(name="small").state["panels"]) == 3  # nothing lost
    settings.OPL_VIEW_MAX_BYTES = 2_000_000  # the bound is the setting's
    assert send(owner, "post", LIST, {"name": "huge", "state": HUGE}).status_code == 201


def test_a_project_keeps_at_most_its_setting_of_views(api_client, alice, bob, lab, settings):
    settings.OPL_VIEWS_PER_PROJECT = 3
    owner, member = api_client(alice), api_client(bob)
    ids = [send(owner, "post", LIST, {"name": f"v{i}"}).json()["id"] for i in range(2)]
    assert send(member, "post", LIST, {"name": "mine"}).status_code == 201
    answer = send(member, "post", LIST, {"name": "one-more"})
    assert answer.status_code == 400 and field_of(answer) == "project"
    assert "OPL_VIEWS_PER_PROJECT" in answer.json()["error"]
    assert send(owner, "patch", f"/api/v1/views/{ids[0]}", {"name": "renamed"}).status_code == 200  # saving over one
    assert owner.delete(f"/api/v1/views/{ids[1]}").status_code == 200
    assert send(member, "post", LIST, {"name": "one-more"}).status_code == 201
    assert lab.saved_views.count() == 3


def test_the_list_answers_summaries_and_the_state_comes_per_view(api_client, alice, bob, lab, settings):
    settings.OPL_VIEW_MAX_BYTES = 2_000_000
    owner = api_client(alice)
    ids = [send(owner, "post", LIST, {"name": f"big-{i}", "state": HUGE}).json()["id"] for i in range(4)]
    answer = api_client(bob).get(LIST)
    assert answer.status_code == 200 and len(answer.content) < 2_000  # not 4 x 1 MB
    views = answer.json()["views"]
    assert [v["id"] for v in views] == ids
    assert set(views[0]) == {"id", "name", "owner", "page", "default", "panels", "updated_at"}
    assert (views[0]["owner"], views[0]["panels"], views[0]["default"]) == ("alice", 300, False)
    one = api_client(bob).get(f"/api/v1/views/{ids[0]}").json()
    assert [p["keys"] for p in one["state"]["panels"]] == [p["keys"] for p in HUGE["panels"]]


def test_only_the_author_or_an_owner_changes_or_deletes_a_view(api_client, alice, bob, charlie, lab):
    lab.members.add(charlie)  # a second member
    owner, member, other_member = api_client(alice), api_client(bob), api_client(charlie)
    bobs = send(member, "post", LIST, {"name": "bobs"}).json()["id"]
    alices = send(owner, "post", LIST, {"name": "alices"}).json()["id"]

    for path, body in ((f"/api/v1/views/{alices}", {"name": "taken-over"}), (f"/api/v1/views/{bobs}", {"name": "x"})):
        refused = send(other_member, "patch", path, body)
        assert refused.status_code == 403 and field_of(refused) == "id"
    assert other_member.delete(f"/api/v1/views/{bobs}").status_code == 403
    assert send(member, "patch", f"/api/v1/views/{alices}", {"state": {"smooth": 0.9}}).status_code == 403
    assert member.delete(f"/api/v1/views/{alices}").status_code == 403
    assert set(SavedView.objects.values_list("name", flat=True)) == {"bobs", "alices"}  # nothing changed

    assert send(member, "patch", f"/api/v1/views/{bobs}", {"name": "bobs-2", "default": False}).status_code == 200
    assert send(owner, "patch", f"/api/v1/views/{bobs}", {"name": "tidied"}).status_code == 200  # an owner may
    assert owner.delete(f"/api/v1/views/{bobs}").status_code == 200


def test_only_owners_choose_the_project_default(api_client, alice, bob, lab):
    owner, member = api_client(alice), api_client(bob)
    refused = send(member, "post", LIST, {"name": "mine", "default": True})
    assert refused.status_code == 403 and field_of(refused) == "default"
    mine = send(member, "post", LIST, {"name": "mine"}).json()["id"]
    refused = send(member, "patch", f"/api/v1/views/{mine}", {"default": True})
    assert refused.status_code == 403 and field_of(refused) == "default"
    assert not SavedView.objects.filter(is_default=True).exists()

    assert send(owner, "patch", f"/api/v1/views/{mine}", {"default": True}).json()["default"] is True
    # once the project's default, it is the owners' to change: every run page of the project applies it
    refused = send(member, "patch", f"/api/v1/views/{mine}", {"state": {"smooth": 0.9}})
    assert refused.status_code == 403 and field_of(refused) == "default"
    assert member.delete(f"/api/v1/views/{mine}").status_code == 403
    assert send(owner, "patch", f"/api/v1/views/{mine}", {"default": False}).json()["default"] is False
