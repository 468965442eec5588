"""Membership is checked at every write, not only when a run is opened: a member removed from a
project neither opens their runs there again nor writes into them with the tokens they hold, a
project's owners cancel (and so stop) any run in it, and a run's token stops soon after the run
ended. Replayed through the API as the users involved: alice owns projA, dave was a member."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from orchestrator.accounts.services import api_token_create
from orchestrator.experiments.models import Membership, Run
from orchestrator.experiments.services import project_create
from tests.unit.metrics.helpers import points

pytestmark = pytest.mark.django_db
CLIENT_ID = "dave-run-0001"


def post(path: str, body: dict, token: str):
    return Client().post(path, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


def patch(path: str, body: dict, token: str):
    return Client().patch(path, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")


def open_run(token: str, project: str | None = "projA", client_id: str = CLIENT_ID):
    body = {"client_id": client_id, "name": "dave-run", "config": {"lr": 1}}
    if project is not None:
        body["project"] = project
    return post("/api/v1/sdk/runs", body, token)


def writes(run_id: int, token: str) -> dict[str, int]:
    """The status of each ingestion endpoint for this token."""
    return {
        "metrics": post(
            f"/api/v1/runs/{run_id}/metrics", {"attempt": 1, "points": points("train/loss", [1])}, token
        ).status_code,
        "samples": post(f"/api/v1/runs/{run_id}/samples", {"attempt": 1, "samples": []}, token).status_code,
        "heartbeat": post(f"/api/v1/runs/{run_id}/heartbeat", {"step": 1}, token).status_code,
    }


ACCEPTED = {"metrics": 202, "samples": 200, "heartbeat": 200}
REFUSED = {"metrics": 404, "samples": 404, "heartbeat": 404}


@pytest.fixture
def world(db):
    alice = User.objects.create_user("alice")
    dave = User.objects.create_user("dave")
    project = project_create(owner=alice, name="projA")
    Membership.objects.create(project=project, user=dave, role=Membership.Role.MEMBER)
    alice_api = api_token_create(user=alice, name="alice")
    dave_api = api_token_create(user=dave, name="dave")
    logging = post("/api/v1/sdk/tokens", {"name": "dave-cluster"}, dave_api).json()["token"]
    opened = open_run(logging)
    assert opened.status_code == 201, opened.content
    return {
        "alice": alice_api,
        "dave": dave_api,
        "logging": logging,
        "run": opened.json()["id"],
        "run_token": opened.json()["token"],
        "project": project,
    }


def remove_dave(world) -> None:
    answer = patch("/api/v1/projects/projA", {"remove_members": ["dave"]}, world["alice"])
    assert answer.status_code == 200, answer.content


def test_a_removed_member_cannot_reopen_the_run_to_get_its_token_again(world):
    assert open_run(world["logging"]).status_code == 200  # a member reopens their run
    remove_dave(world)
    new = open_run(world["logging"], client_id="dave-run-0002")
    again = open_run(world["logging"])
    assert again.status_code == new.status_code == 404
    assert again.json()["error"] == new.json()["error"]  # the same answer as for opening a new run there
    assert "token" not in again.json()


def test_reopening_must_name_the_runs_project(world):
    project_create(owner=User.objects.get(username="dave"), name="daves-own")
    for named in ("daves-own", None):  # another project of dave's, or none (his personal project)
        answer = open_run(world["logging"], project=named)
        assert answer.status_code == 409 and answer.json()["errors"][0]["field"] == "project", named
        assert "token" not in answer.json()


def test_a_removed_members_run_token_stops_at_once_with_the_answer_of_a_missing_run(world):
    run_id, token = world["run"], world["run_token"]
    assert writes(run_id, token) == ACCEPTED
    remove_dave(world)
    assert writes(run_id, token) == REFUSED
    missing = post(f"/api/v1/runs/{run_id + 1000}/heartbeat", {}, token).json()
    gone = post(f"/api/v1/runs/{run_id}/heartbeat", {}, token).json()
    assert gone["error"] == missing["error"].replace(str(run_id + 1000), str(run_id))
    finish = post(f"/api/v1/sdk/runs/{run_id}/finish", {"exit_code": 0}, token)
    assert finish.status_code == 404 and Run.objects.get(pk=run_id).state == "running"


@pytest.mark.parametrize("change", ["viewer", "deactivated"])
def test_a_member_made_viewer_or_deactivated_stops_writing_too(world, change):
    dave = User.objects.get(username="dave")
    if change == "viewer":
        answer = patch("/api/v1/projects/projA", {"set_roles": {"dave": "viewer"}}, world["alice"])
        assert answer.status_code == 200, answer.content
    else:
        User.objects.filter(pk=dave.pk).update(is_active=False)
    assert writes(world["run"], world["run_token"]) == REFUSED


def test_the_projects_owner_cancels_a_members_run_and_that_stops_its_writes(world):
    run_id, token = world["run"], world["run_token"]
    answer = post(f"/api/v1/runs/{run_id}/cancel", {}, world["alice"])
    assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
    refused = post(f"/api/v1/runs/{run_id}/metrics", {"attempt": 1, "points": points("train/loss", [2])}, token)
    assert refused.status_code == 403 and "was cancelled" in refused.json()["error"]
    assert post(f"/api/v1/runs/{run_id}/heartbeat", {}, token).status_code == 403
    # and reopening hands out a token that writes nothing
    reopened = open_run(world["logging"])
    assert reopened.status_code == 200 and reopened.json()["state"] == "cancelled"
    assert post(f"/api/v1/runs/{run_id}/heartbeat", {}, reopened.json()["token"]).status_code == 403


def test_the_owners_cancel_works_from_the_page_too_but_not_for_other_members(world):
    carol = User.objects.create_user("carol")
    Membership.objects.create(project=world["project"], user=carol, role=Membership.Role.MEMBER)
    browser = Client()
    browser.force_login(carol)
    assert browser.post(f"/runs/{world['run']}/cancel").status_code == 403  # a member cancels only their own
    assert Run.objects.get(pk=world["run"]).state == "running"
    browser.force_login(User.objects.get(username="alice"))
    assert browser.post(f"/runs/{world['run']}/cancel").status_code == 302
    assert Run.objects.get(pk=world["run"]).state == "cancelled"


def test_a_run_token_stops_after_a_short_grace_once_the_run_ended(world, settings):
    run_id, token = world["run"], world["run_token"]
    assert post(f"/api/v1/sdk/runs/{run_id}/finish", {"exit_code": 0}, token).json()["state"] == "succeeded"
    assert writes(run_id, token) == ACCEPTED  # the last flush, just after the end
    assert settings.OPL_RUN_TOKEN_GRACE_S == 300
    Run.objects.filter(pk=run_id).update(finished_at=timezone.now() - timedelta(seconds=301))
    refused = post(f"/api/v1/runs/{run_id}/metrics", {"attempt": 1, "points": points("train/loss", [3])}, token)
    assert refused.status_code == 403 and "expired" in refused.json()["error"]
