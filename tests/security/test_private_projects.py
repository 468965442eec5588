"""Projects are private to their members: naming one is not joining it (Bob's attack, API and
form), only owners change membership, and the three roles mean the same in the API, the page
and the admin."""

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from orchestrator.experiments.models import Experiment, Membership, Project, Run


def post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def patch(client, url, body):
    return client.patch(url, data=json.dumps(body), content_type="application/json")


@pytest.fixture
def alice_private(alice, api_client, tiny_config):
    response = post(
        api_client(alice), "/api/v1/experiments", {"name": "secret", "project": "alice-private", "config": tiny_config}
    )
    assert response.status_code == 201
    return Project.objects.get(name="alice-private")


def test_bob_cannot_join_a_project_by_naming_it_in_the_api(alice_private, bob, api_client, tiny_config):
    bob_api = api_client(bob)
    response = post(
        bob_api, "/api/v1/experiments", {"name": "sneak", "project": "alice-private", "config": tiny_config}
    )
    assert response.status_code == 404
    assert response.json()["errors"][0]["field"] == "project"
    assert not alice_private.members.filter(pk=bob.pk).exists()
    assert not Experiment.objects.filter(name="sneak").exists()
    # and so nothing of alice's is readable or changeable
    run_id = Run.objects.get(experiment__name="secret").pk
    assert bob_api.get(f"/api/v1/runs/{run_id}").status_code == 404
    assert bob_api.get(f"/api/v1/runs/{run_id}/metrics/keys").status_code == 404
    assert bob_api.get("/api/v1/projects/alice-private").status_code == 404
    assert patch(bob_api, "/api/v1/projects/alice-private", {"add_members": ["bob"]}).status_code == 404
    assert bob_api.get("/api/v1/runs").json()["count"] == 0


def test_bob_cannot_join_a_project_by_naming_it_in_the_form(alice_private, bob):
    client = Client()
    client.force_login(bob)
    response = client.post(
        "/experiments/new/", {"name": "sneak", "project": "alice-private", "model.name": "tiny", "train.device": "cpu"}
    )
    assert response.status_code == 404
    assert "alice-private" in response.content.decode()  # the error names the field's value
    assert not alice_private.members.filter(pk=bob.pk).exists()
    assert not Experiment.objects.filter(name="sneak").exists()


def test_a_new_name_creates_a_project_owned_by_its_creator(bob, api_client, tiny_config):
    assert (
        post(
            api_client(bob), "/api/v1/experiments", {"name": "e", "project": "bob-lab", "config": tiny_config}
        ).status_code
        == 201
    )
    assert Membership.objects.get(project__name="bob-lab").role == "owner"


def test_no_project_means_a_personal_project_nobody_can_squat(alice, bob, api_client, tiny_config):
    # bob cannot take the name "alice" first; alice's default project is hers alone, by that name
    assert post(api_client(bob), "/api/v1/projects", {"name": "alice"}).status_code == 400
    created = post(api_client(alice), "/api/v1/experiments", {"name": "e", "config": tiny_config}).json()
    project = Experiment.objects.get(pk=created["id"]).project
    assert project.personal_for == alice and project.name == "alice"
    assert list(project.members.all()) == [alice]
    again = post(api_client(alice), "/api/v1/experiments", {"name": "e2", "config": tiny_config}).json()
    assert Experiment.objects.get(pk=again["id"]).project == project


def test_only_owners_change_members_and_roles(alice_private, bob, charlie, api_client, tiny_config):
    alice_api, bob_api = api_client(alice_private.members.get()), api_client(bob)
    assert patch(alice_api, "/api/v1/projects/alice-private", {"add_members": ["bob"], "role": "viewer"}).json()[
        "invited"
    ] == {"bob": "viewer"}
    assert post(bob_api, "/api/v1/projects/alice-private/invitation", {}).json()["roles"] == {
        "alice": "owner",
        "bob": "viewer",
    }
    # a viewer reads but neither adds members nor experiments
    assert bob_api.get("/api/v1/projects/alice-private").status_code == 200
    assert patch(bob_api, "/api/v1/projects/alice-private", {"add_members": ["charlie"]}).status_code == 403
    assert (
        post(
            bob_api, "/api/v1/experiments", {"name": "v", "project": "alice-private", "config": tiny_config}
        ).status_code
        == 403
    )
    # a member adds experiments but still does not manage members
    assert patch(alice_api, "/api/v1/projects/alice-private", {"set_roles": {"bob": "member"}}).status_code == 200
    assert (
        post(
            bob_api, "/api/v1/experiments", {"name": "m", "project": "alice-private", "config": tiny_config}
        ).status_code
        == 201
    )
    assert patch(bob_api, "/api/v1/projects/alice-private", {"set_roles": {"bob": "owner"}}).status_code == 403
    assert patch(bob_api, "/api/v1/projects/alice-private", {"remove_members": ["alice"]}).status_code == 403
    # the last owner cannot leave the project ownerless
    response = patch(alice_api, "/api/v1/projects/alice-private", {"set_roles": {"alice": "member"}})
    assert response.status_code == 409
    assert patch(alice_api, "/api/v1/projects/alice-private", {"remove_members": ["bob"]}).json()["members"] == [
        "alice"
    ]


def test_a_demoted_viewer_can_no_longer_change_their_own_runs(alice_private, bob, api_client, tiny_config):
    alice_api, bob_api = api_client(alice_private.members.get()), api_client(bob)
    patch(alice_api, "/api/v1/projects/alice-private", {"add_members": ["bob"]})
    post(bob_api, "/api/v1/projects/alice-private/invitation", {})
    run_id = post(
        bob_api, "/api/v1/experiments", {"name": "m", "project": "alice-private", "config": tiny_config}
    ).json()["runs"][0]
    page = Client()
    page.force_login(bob)
    assert "Cancel run" in page.get(f"/runs/{run_id}/").content.decode()
    patch(alice_api, "/api/v1/projects/alice-private", {"set_roles": {"bob": "viewer"}})
    assert post(bob_api, f"/api/v1/runs/{run_id}/cancel", {}).status_code == 403
    assert bob_api.get(f"/api/v1/runs/{run_id}").status_code == 200
    assert "Cancel run" not in page.get(f"/runs/{run_id}/").content.decode()  # the page agrees


def test_projects_page_roles_agree_with_the_api(alice_private, bob, charlie):
    alice = alice_private.members.get()
    owner, member = Client(), Client()
    owner.force_login(alice)
    member.force_login(bob)
    owner.post("/projects/alice-private/members", {"username": "bob", "role": "member"})
    assert not Membership.objects.filter(project=alice_private, user=bob).exists()  # invited, not yet a member
    member.post("/projects/alice-private/invitation/accept")
    assert Membership.objects.get(project=alice_private, user=bob).role == "member"
    # a member's form post is refused: only owners change membership
    assert member.post("/projects/alice-private/members", {"username": "charlie", "role": "owner"}).status_code == 403
    assert member.post("/projects/alice-private/members/remove", {"username": "alice"}).status_code == 403
    assert not alice_private.members.filter(pk=charlie.pk).exists()
    html = member.get("/projects/").content.decode()
    assert "alice (owner)" in html and "bob (member)" in html and "only owners change members" in html
    owner.post("/projects/alice-private/members", {"username": "bob", "role": "viewer"})
    assert Membership.objects.get(project=alice_private, user=bob).role == "viewer"
    owner.post("/projects/alice-private/members/remove", {"username": "bob"})
    assert not alice_private.members.filter(pk=bob.pk).exists()


def test_admin_edits_the_same_roles(alice_private, bob):
    admin = User.objects.create_superuser("root", password="x")
    client = Client()
    client.force_login(admin)
    page = client.get(f"/admin/experiments/project/{alice_private.pk}/change/").content.decode()
    assert 'name="memberships-0-role"' in page and '<option value="viewer">' in page
