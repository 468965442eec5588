"""Schemathesis against the served OpenAPI document (/api/v1/openapi.json): generated valid and
invalid requests to every documented operation must get no server error, and every answer must
match the document (status code, content type, body schema).

Bounded for `make test`: EXAMPLES per operation and generation mode, no shrinking, a fixed seed
(derandomized), so the run takes about a minute or two on two cores.

Requests go through Django's WSGI handler in this process, inside the test's transaction. Ids in
paths point at a real run, experiment and saved view (and the project `lab`) where the generator chose a
valid integer, so the cases reach the views' logic rather than stopping at a 404.
"""

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from orchestrator.accounts.services import api_token_create
from orchestrator.experiments.services import experiment_create
from orchestrator.workspace.services import view_create
from tests.unit.metrics.helpers import points, push, start_attempt

EXAMPLES = 20


def not_a_server_error(ctx, response, case):
    assert response.status_code < 500, f"server error {response.status_code}: {response.text[:500]}"


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


# Loaded from the served document through the WSGI app (the view needs no database).
schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())
schema.config.generation.update(
    max_examples=EXAMPLES, modes=["positive", "negative"], deterministic=True, no_shrink=True
)


@pytest.fixture
def keep_test_connection():
    """Django's test client does the same around each request (and reconnects them after, so this
    comes after any use of it): the WSGI handler must not close the test transaction's connection."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def world(db, alice, bob, tiny_config, client):
    experiment = experiment_create(owner=alice, name="exp", project="lab", config=tiny_config, tags=["t"])
    experiment.project.members.add(bob)
    run, run_token = start_attempt(experiment.runs.get(), 1)
    assert (
        push(client, run.pk, run_token, {"attempt": 1, "points": points("train/loss", range(1, 20))}).status_code == 202
    )
    view = view_create(project=experiment.project, owner=alice, name="v", state={})
    return {
        "view_id": view.pk,
        "run_id": run.pk,
        "experiment_id": experiment.pk,
        "name": "lab",
        "user_token": api_token_create(user=alice, name="schemathesis"),
        "run_token": run_token,
    }


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_document(case, world, keep_test_connection):
    for param, value in list((case.path_parameters or {}).items()):
        if param in world and (isinstance(value, int) or param == "name"):
            case.path_parameters[param] = world[param]
    token = (
        world["run_token"]
        if case.path.endswith(("/metrics", "/heartbeat", "/samples", "/finish")) and case.method == "POST"
        else world["user_token"]
    )
    case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
