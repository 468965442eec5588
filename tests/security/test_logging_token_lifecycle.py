"""Logging tokens are credentials their owner can see and end: capped like personal tokens, listed
on the tokens page and by the API, revocable there, and ended with the personal token that made
them or with their user. Replayed through the API and the page as dave (their owner) and eve."""

import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from orchestrator.accounts.models import ApiToken
from orchestrator.accounts.services import api_token_create
from orchestrator.experiments.models import LoggingToken

pytestmark = pytest.mark.django_db


def call(method: str, path: str, token: str, body: dict | None = None):
    extra = {"data": json.dumps(body), "content_type": "application/json"} if body is not None else {}
    return getattr(Client(), method)(path, HTTP_AUTHORIZATION=f"Bearer {token}", **extra)


def open_run(logging_token: str, client_id: str = "dave-log-0001"):
    return call("post", "/api/v1/sdk/runs", logging_token, {"client_id": client_id, "name": "n", "project": "dave-lab"})


@pytest.fixture
def dave(db):
    return User.objects.create_user("dave")


@pytest.fixture
def dave_api(dave):
    return api_token_create(user=dave, name="laptop", days=30)


def make_logging_token(personal: str, **body) -> dict:
    answer = call("post", "/api/v1/sdk/tokens", personal, {"name": "cluster", **body})
    assert answer.status_code == 201, answer.content
    return answer.json()


def test_a_logging_token_is_capped_like_a_personal_token(dave_api, settings):
    answer = call("post", "/api/v1/sdk/tokens", dave_api, {"days": 3650})
    assert answer.status_code == 400
    assert (
        answer.json()["errors"][0]["field"] == "days"
        and "OPL_API_TOKEN_MAX_DAYS" in answer.json()["errors"][0]["message"]
    )
    assert not LoggingToken.objects.exists()
    settings.OPL_API_TOKEN_MAX_DAYS = 20
    assert call("post", "/api/v1/sdk/tokens", dave_api, {"days": 21}).json()["errors"][0]["field"] == "days"
    made = make_logging_token(dave_api)  # no days: the longest allowed, and never past its personal token
    row = LoggingToken.objects.get(pk=made["id"])
    personal = ApiToken.objects.get(name="laptop")
    assert row.expires_at <= personal.expires_at and (row.expires_at - row.created_at).days <= 20


def test_a_logging_token_ends_no_later_than_the_personal_token_that_made_it(dave, dave_api):
    short = api_token_create(user=dave, name="short", days=7)
    made = make_logging_token(short, days=300)
    assert LoggingToken.objects.get(pk=made["id"]).expires_at == ApiToken.objects.get(name="short").expires_at


def test_logging_tokens_are_listed_to_their_owner_only_and_never_shown_again(dave, dave_api):
    made = make_logging_token(dave_api)
    listed = call("get", "/api/v1/sdk/tokens", dave_api)
    assert listed.status_code == 200
    (row,) = listed.json()["tokens"]
    assert row["id"] == made["id"] and row["name"] == "cluster"
    assert row["made_with"] == {"id": ApiToken.objects.get(name="laptop").pk, "name": "laptop"}
    assert made["token"] not in listed.content.decode() and "token" not in row
    eve = User.objects.create_user("eve")
    assert call("get", "/api/v1/sdk/tokens", api_token_create(user=eve, name="e")).json() == {"tokens": []}
    # a read-only personal token lists them but neither makes nor revokes one
    read_only = api_token_create(user=dave, name="read", scope="read")
    assert [t["id"] for t in call("get", "/api/v1/sdk/tokens", read_only).json()["tokens"]] == [made["id"]]
    assert call("post", "/api/v1/sdk/tokens", read_only, {}).status_code == 403
    assert call("delete", f"/api/v1/sdk/tokens/{made['id']}", read_only).status_code == 403
    # the tokens page shows them too
    browser = Client()
    browser.force_login(dave)
    page = browser.get("/account/tokens/").content.decode()
    assert f'data-logging-token="{made["id"]}"' in page and made["token"] not in page


def test_the_owner_revokes_a_logging_token_through_the_api_and_others_get_the_404_of_a_missing_one(dave_api):
    made = make_logging_token(dave_api)
    assert open_run(made["token"]).status_code == 201
    eve_api = api_token_create(user=User.objects.create_user("eve"), name="e")
    theirs = call("delete", f"/api/v1/sdk/tokens/{made['id']}", eve_api)
    missing = call("delete", f"/api/v1/sdk/tokens/{made['id'] + 1000}", eve_api)
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["error"] == missing.json()["error"].replace(str(made["id"] + 1000), str(made["id"]))
    assert open_run(made["token"], "dave-log-0002").status_code == 201  # still alive
    assert call("delete", f"/api/v1/sdk/tokens/{made['id']}", dave_api).json() == {"revoked": made["id"]}
    assert open_run(made["token"], "dave-log-0003").status_code == 401
    assert open_run(made["token"]).status_code == 401  # nor does it hand out its runs' tokens again
    assert call("get", "/api/v1/sdk/tokens", dave_api).json() == {"tokens": []}


def test_the_owner_revokes_a_logging_token_on_the_page_with_its_csrf_token(dave, dave_api):
    made = make_logging_token(dave_api)
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(dave)
    page = browser.get("/account/tokens/").content.decode()
    revoke = f"/account/logging-tokens/{made['id']}/revoke"
    assert f'action="{revoke}"' in page
    assert browser.post(revoke).status_code == 403  # no CSRF token: refused
    assert LoggingToken.objects.filter(pk=made["id"]).exists()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    eve = Client(enforce_csrf_checks=True)
    eve.force_login(User.objects.create_user("eve"))
    eve_page = eve.get("/account/tokens/").content.decode()
    eve_csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', eve_page).group(1)
    assert eve.post(revoke, {"csrfmiddlewaretoken": eve_csrf}).status_code == 302  # not hers: nothing happens
    assert LoggingToken.objects.filter(pk=made["id"]).exists()
    assert browser.post(revoke, {"csrfmiddlewaretoken": csrf}).status_code == 302
    assert not LoggingToken.objects.filter(pk=made["id"]).exists()
    assert open_run(made["token"]).status_code == 401


def test_revoking_the_personal_token_ends_the_logging_tokens_it_made(dave, dave_api):
    made = make_logging_token(dave_api)
    assert open_run(made["token"]).status_code == 201
    browser = Client()
    browser.force_login(dave)
    personal = ApiToken.objects.get(name="laptop")
    assert browser.post(f"/account/tokens/{personal.pk}/delete").status_code == 302
    assert call("get", "/api/v1/sdk/tokens", dave_api).status_code == 401  # the personal token is gone
    assert open_run(made["token"], "dave-log-0002").status_code == 401  # and so is what it made
    assert open_run(made["token"]).status_code == 401


def test_a_deactivated_users_logging_tokens_and_run_tokens_stop(dave, dave_api):
    made = make_logging_token(dave_api)
    run = open_run(made["token"]).json()
    User.objects.filter(pk=dave.pk).update(is_active=False)
    assert open_run(made["token"], "dave-log-0002").status_code == 401
    assert call("post", f"/api/v1/runs/{run['id']}/heartbeat", run["token"], {}).status_code == 404
