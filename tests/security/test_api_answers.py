"""Every answer under /api/ is JSON (Django's own 404, 405 and 413 pages included), and
the query parameters of the samples and metrics views answer a 400 naming the field, never a 500
(a NUL reaches PostgreSQL, "²" passes str.isdigit and fails int()). Few tests, many requests each:
a run costs a second to make."""

import json

import pytest
from django.test import Client

from orchestrator.samples.schemas import prompt_hash
from tests.unit.metrics.helpers import make_run, points, push
from tests.unit.samples.helpers import batch, post, sample

pytestmark = pytest.mark.django_db

INGESTION = ["/api/v1/runs/{run}/metrics", "/api/v1/runs/{run}/samples", "/api/v1/runs/{run}/heartbeat"]


@pytest.fixture
def world(client, alice, tiny_config):
    """A run with two samples and a point, its token, and alice's browser session."""
    run, token = make_run(alice, tiny_config)
    assert post(client, run.pk, token, batch([sample(2, i) for i in range(2)])).status_code == 200
    assert push(client, run.pk, token, {"points": points("train/loss", [1])}).status_code == 202
    browser = Client()
    browser.force_login(alice)
    return run, token, browser


def is_json_error(response) -> bool:
    return response["Content-Type"] == "application/json" and "error" in json.loads(response.content)


def test_other_methods_on_ingestion_urls_are_a_json_405_with_allow(client, world):
    run, token, _ = world
    for path in INGESTION:
        for method in ("options", "put", "delete", "patch"):
            response = getattr(client, method)(path.format(run=run.pk), HTTP_AUTHORIZATION=f"Bearer {token}")
            assert response.status_code == 405 and is_json_error(response), (method, path)
            assert response["Allow"] == ("POST" if path.endswith("heartbeat") else "GET, POST")


def test_paths_with_a_newline_are_a_json_404(world):
    """%0A: the test client, like urllib, drops a raw newline from a URL; a server decodes this one."""
    run, _, browser = world
    for path in (
        f"/api/v1/runs/{run.pk}/metrics%0A",
        "/api/v1/ru%0Ans",
        "/api/%0A",
        f"/api/v1/runs/{run.pk}%0A/samples",
    ):
        response = browser.get(path)
        assert response.status_code == 404 and is_json_error(response), path


def test_a_heartbeat_over_the_upload_limit_is_a_json_413_naming_it(client, world, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    run, token, _ = world
    response = client.post(
        f"/api/v1/runs/{run.pk}/heartbeat",
        data=json.dumps({"step": 1, "pad": "x" * 2000}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 413 and is_json_error(response)
    assert "1,000 bytes (DATA_UPLOAD_MAX_MEMORY_SIZE)" in response.json()["error"]


def test_a_compare_prompt_that_is_not_a_hash_is_a_400_and_an_unknown_hash_is_empty(world):
    run, _, browser = world
    for prompt in ("a\x00b", "\x00", "zz", "x" * 200):
        response = browser.get("/compare/samples/", {"runs": str(run.pk), "prompt": prompt})
        assert response.status_code == 400 and response.content.decode().startswith("prompt: "), repr(prompt)
    assert (
        browser.get("/compare/samples/", {"runs": str(run.pk), "prompt": prompt_hash("never asked")}).status_code == 200
    )


def test_step_numbers_in_other_scripts_are_a_400(world):
    run, _, browser = world
    for url, param in (
        (f"/runs/{run.pk}/samples/", "step"),
        (f"/runs/{run.pk}/samples/newer/", "after"),
        (f"/api/v1/runs/{run.pk}/samples", "step"),
    ):
        for value in ("²", "١"):
            response = browser.get(url, {param: value})
            assert response.status_code == 400 and param in response.content.decode(), (url, value)


def test_stream_parameters_are_checked_before_any_query(world):
    run, _, browser = world
    for query in ({"keys": "train/loss,a\x00"}, {"after": "1\n"}, {"after": "²"}):
        response = browser.get(f"/api/v1/runs/{run.pk}/metrics/stream", query)
        assert response.status_code == 400 and is_json_error(response), query
