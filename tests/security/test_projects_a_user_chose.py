"""A user's runs go only into projects they chose: the creator's own, or one they accepted an
invitation to. alice could open an SDK run in a project named "carol" (creating it), add carol as
a member, and then carol's SDK runs naming "carol" landed in alice's project, where alice read
their config. Now a new project cannot take another user's user name, adding a member is an
invitation the member accepts or declines, and until then nothing of theirs lands there."""

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import Membership, Project, ProjectInvitation, Run

CONFIG = {"optim": {"lr": 0.001}, "secret_dataset": "/data/carol/unreleased"}


def sdk_open(token: str, project: str, client_id: str = "carol-run-001"):
    body = {"client_id": client_id, "name": "m", "project": project, "config": CONFIG}
    return Client().post(
        "/api/v1/sdk/runs", json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def send(client, method, url, body=None):
    return getattr(client, method)(url, data=json.dumps(body or {}), content_type="application/json")


@pytest.fixture
def carol(db) -> User:
    return User.objects.create_user("carol", password="carol-pass-123")


def test_a_new_project_cannot_take_another_users_name(alice, carol, api_client):
    _, alices = logging_token_create(user=alice)
    for name in ("carol", "Carol"):
        answer = sdk_open(alices, name, client_id=f"squat-{name}-01")
        assert answer.status_code == 400, answer.content
        assert answer.json()["errors"] == [
            {"field": "project", "message": f"{name!r} is another user's name: a new project needs another name"}
        ]
    refused = send(api_client(alice), "post", "/api/v1/projects", {"name": "carol"})
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "project"
    page = Client()
    page.force_login(alice)
    page.post("/projects/new", {"name": "carol"})
    assert not Project.objects.filter(name__iexact="carol").exists() and not Run.objects.exists()
    # a user's own name is theirs to use
    _, carols = logging_token_create(user=carol)
    assert sdk_open(carols, "carol").status_code == 201
    assert Project.objects.get(name="carol").memberships.get().user == carol


def test_an_added_member_is_invited_and_nothing_of_theirs_lands_until_they_accept(alice, carol, api_client):
    _, alices = logging_token_create(user=alice)
    assert sdk_open(alices, "carols-team", client_id="alice-run-001").status_code == 201
    owner = api_client(alice)
    answer = send(owner, "patch", "/api/v1/projects/carols-team", {"add_members": ["carol"]})
    assert answer.status_code == 200 and answer.json()["invited"] == {"carol": "member"}
    assert answer.json()["members"] == ["alice"]

    _, carols = logging_token_create(user=carol)
    landed = sdk_open(carols, "carols-team")
    assert landed.status_code == 404  # as for any project she is not in: her run does not land there
    assert not Run.objects.filter(owner=carol).exists()
    invitee = api_client(carol)
    assert invitee.get("/api/v1/projects/carols-team").status_code == 404
    assert invitee.get("/api/v1/projects").json()["invitations"] == [
        {
            "project": "carols-team",
            "role": "member",
            "invited_by": "alice",
            "created_at": ProjectInvitation.objects.get().created_at.isoformat(),
        }
    ]

    joined = send(invitee, "post", "/api/v1/projects/carols-team/invitation")
    assert joined.status_code == 200 and joined.json()["roles"] == {"alice": "owner", "carol": "member"}
    assert sdk_open(carols, "carols-team").status_code == 201  # her choice now
    assert not ProjectInvitation.objects.exists()


def test_an_invitation_is_declined_or_withdrawn(alice, bob, carol, api_client):
    _, alices = logging_token_create(user=alice)
    sdk_open(alices, "shared", client_id="alice-run-002")
    owner = api_client(alice)
    send(owner, "patch", "/api/v1/projects/shared", {"add_members": ["carol", "bob"], "role": "viewer"})
    declined = send(api_client(carol), "delete", "/api/v1/projects/shared/invitation")
    assert declined.status_code == 200
    assert send(api_client(carol), "post", "/api/v1/projects/shared/invitation").status_code == 404
    withdrawn = send(owner, "patch", "/api/v1/projects/shared", {"remove_members": ["bob"]})
    assert withdrawn.status_code == 200 and withdrawn.json()["invited"] == {}
    assert send(api_client(bob), "post", "/api/v1/projects/shared/invitation").status_code == 404
    assert list(Membership.objects.filter(project__name="shared").values_list("user__username", flat=True)) == ["alice"]


def test_the_projects_page_shows_an_invitation_to_accept_or_decline(alice, carol):
    owner, invitee = Client(), Client()
    owner.force_login(alice)
    invitee.force_login(carol)
    owner.post("/projects/new", {"name": "rl-lab"})
    owner.post("/projects/rl-lab/members", {"username": "carol", "role": "viewer"})
    assert "carol (invited: viewer)" in owner.get("/projects/").content.decode()
    html = invitee.get("/projects/").content.decode()
    assert "alice invites you to" in html and "/projects/rl-lab/invitation/accept" in html
    invitee.post("/projects/rl-lab/invitation/accept")
    assert Membership.objects.get(project__name="rl-lab", user=carol).role == "viewer"
    # a member's role changes at once: they chose the project already
    owner.post("/projects/rl-lab/members", {"username": "carol", "role": "member"})
    assert Membership.objects.get(project__name="rl-lab", user=carol).role == "member"
    assert not ProjectInvitation.objects.exists()
