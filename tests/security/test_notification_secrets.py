"""A project's notification secrets by role: the Slack-style webhook URL (itself a credential) and
the extra notification addresses are read by the project's owners only; members, viewers and any
read-only token see that each is set. Replayed as alice (owner), bob (member), carol (viewer)."""

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from orchestrator.accounts.services import api_token_create
from orchestrator.experiments.models import Membership
from orchestrator.experiments.services import project_create

pytestmark = pytest.mark.django_db
WEBHOOK = "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX"
PRIVATE = "alice.private@example.org"


@pytest.fixture
def world(db):
    alice, bob, carol = (User.objects.create_user(n) for n in ("alice", "bob", "carol"))
    staff = User.objects.create_user("root", is_staff=True)
    project = project_create(owner=alice, name="projA")
    Membership.objects.create(project=project, user=bob, role=Membership.Role.MEMBER)
    Membership.objects.create(project=project, user=carol, role=Membership.Role.VIEWER)
    tokens = {u.username: api_token_create(user=u, name="t") for u in (alice, bob, carol, staff)}
    tokens |= {f"{u.username}-read": api_token_create(user=u, name="r", scope="read") for u in (alice, carol)}
    body = {"notifications": {"webhook_url": WEBHOOK, "emails": [PRIVATE, "oncall@example.org"]}}
    answer = post(tokens["alice"], body)
    assert answer.status_code == 200 and answer.json()["notifications"]["webhook_url"] == WEBHOOK
    return tokens


def post(token: str, body: dict):
    return Client().post(
        "/api/v1/projects/projA/alerts",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def read(token: str):
    answer = Client().get("/api/v1/projects/projA/alerts", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code == 200
    return answer


@pytest.mark.parametrize("who", ["carol", "bob", "carol-read", "alice-read"])
def test_others_and_read_only_tokens_see_only_that_a_secret_is_set(world, who):
    answer = read(world[who])
    text = answer.content.decode()
    assert "hooks.slack.com" not in text and PRIVATE not in text and "oncall@" not in text
    assert answer.json()["notifications"] == {
        "webhook_url": "set",
        "emails": ["set", "set"],
        "email_owner": True,
        "masked": True,
    }


@pytest.mark.parametrize("who", ["alice", "root"])
def test_owners_and_staff_read_them(world, who):
    notifications = read(world[who]).json()["notifications"]
    assert notifications["webhook_url"] == WEBHOOK and PRIVATE in notifications["emails"]
    assert notifications["masked"] is False


def test_nothing_set_reads_as_nothing_set(world):
    assert post(world["alice"], {"notifications": {"webhook_url": "", "emails": []}}).status_code == 200
    assert read(world["carol"]).json()["notifications"]["webhook_url"] == ""
    assert read(world["carol"]).json()["notifications"]["emails"] == []


def test_the_project_alerts_page_shows_a_viewer_no_secret(world):
    browser = Client()
    browser.force_login(User.objects.get(username="carol"))
    page = browser.get("/projects/projA/alerts/")
    assert page.status_code == 200
    assert "hooks.slack.com" not in page.content.decode() and PRIVATE not in page.content.decode()
