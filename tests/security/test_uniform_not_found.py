"""One answer for "not yours" and "not there": for each endpoint, what bob (no member of alice's
project) gets for alice's id and for an id nobody has is the same status and the same body but
for the id itself, so no answer tells which ids exist. Ingestion too: a run token posting to
another run gets what it gets for a run that does not exist."""

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from orchestrator.accounts.services import api_token_create
from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.services import experiment_create
from tests.unit.metrics.helpers import make_run, points

pytestmark = pytest.mark.django_db
MISSING = 987654


@pytest.fixture
def world(db, tiny_config):
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    experiment = experiment_create(owner=alice, name="secret", project="alice-lab", config=tiny_config)
    run, _ = make_run(alice, tiny_config)
    bobs_run, bobs_token = make_run(bob, tiny_config)
    logging_token = logging_token_create(user=alice, name="alice")[0]
    return {
        "bob": api_token_create(user=bob, name="bob"),
        "bobs_run_token": bobs_token,
        "exp": experiment.pk,
        "run": run.pk,
        "logging_token": logging_token.pk,
    }


def answer(method: str, path: str, token: str, body: dict | None = None):
    extra = {"data": json.dumps(body), "content_type": "application/json"} if body is not None else {}
    response = getattr(Client(), method)(path, HTTP_AUTHORIZATION=f"Bearer {token}", **extra)
    return response.status_code, response.content.decode()


# (method, path with {id}, which id of alice's, the caller's token, body)
CASES = [
    ("get", "/api/v1/metrics/glance?experiment={id}", "exp", "bob", None),
    ("get", "/api/v1/experiments/{id}", "exp", "bob", None),
    ("get", "/api/v1/runs/{id}", "run", "bob", None),
    ("post", "/api/v1/runs/{id}/cancel", "run", "bob", {}),
    ("get", "/api/v1/runs/{id}/metrics/keys", "run", "bob", None),
    ("delete", "/api/v1/sdk/tokens/{id}", "logging_token", "bob", None),
    ("post", "/api/v1/runs/{id}/metrics", "run", "bobs_run_token", {"attempt": 1, "points": points("a", [1])}),
    ("post", "/api/v1/runs/{id}/samples", "run", "bobs_run_token", {"attempt": 1, "samples": []}),
    ("post", "/api/v1/runs/{id}/heartbeat", "run", "bobs_run_token", {}),
    ("post", "/api/v1/sdk/runs/{id}/finish", "run", "bobs_run_token", {"exit_code": 0}),
]


@pytest.mark.parametrize("method,path,kind,caller,body", CASES, ids=[f"{c[0]} {c[1]}" for c in CASES])
def test_someone_elses_id_answers_as_a_missing_one(world, method, path, kind, caller, body):
    theirs_status, theirs = answer(method, path.format(id=world[kind]), world[caller], body)
    missing_status, missing = answer(method, path.format(id=MISSING), world[caller], body)
    assert theirs_status == missing_status == 404
    assert theirs == missing.replace(str(MISSING), str(world[kind]))


def test_the_compare_page_too(world):
    browser = Client()
    browser.force_login(User.objects.get(username="bob"))
    theirs = browser.get(f"/compare/?experiment={world['exp']}")
    missing = browser.get(f"/compare/?experiment={MISSING}")
    assert theirs.status_code == missing.status_code == 404
