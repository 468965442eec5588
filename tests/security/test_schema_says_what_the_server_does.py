"""The API does what its OpenAPI document says, as schemathesis found it did not: a query value
outside its documented set is refused (`?stat=AAA` was a 200), JSON types are not coerced
(`"default": 0`, `"priority": false` were taken as false and 0), a method the document does not
list answers 405 naming the ones it does (TRACE was a 200 or a 400), and the NUL character every
input refuses is refused in the document too."""

import json
import re

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.web.openapi import document
from orchestrator.workspace.models import SavedView


@pytest.fixture
def lab(alice, tiny_config):
    return experiment_create(owner=alice, name="e", project="lab", config=tiny_config)


def send(client, method, url, body):
    return getattr(client, method)(url, data=json.dumps(body), content_type="application/json")


def fields(answer) -> list[str]:
    return [e["field"] for e in answer.json()["errors"]]


def test_a_query_value_outside_its_documented_set_is_refused(api_client, alice, lab):
    client = api_client(alice)
    answer = client.get("/api/v1/runs", {"stat": "AAA", "sort": "-metric:train/loss"})
    assert answer.status_code == 400 and fields(answer) == ["stat"]
    answer = client.get("/api/v1/runs", {"state": "sleeping"})
    assert answer.status_code == 400 and fields(answer) == ["state"]
    assert client.get("/api/v1/runs", {"stat": "tail_mean", "state": "queued"}).json()["count"] == 1


@pytest.mark.parametrize(
    "method,url,body,field",
    [
        ("post", "/api/v1/projects/lab/views", {"name": "v", "default": 0}, "default"),
        (
            "post",
            "/api/v1/projects/lab/views",
            {"name": "v", "state": {"panels": [{"id": "p", "keys": ["a/b"], "log_y": 1}]}},
            "state.panels.0.log_y",
        ),
        ("post", "/api/v1/experiments/{exp}/priority", {"priority": False}, "priority"),
        ("post", "/api/v1/experiments/{exp}/priority", {"priority": 2.0}, "priority"),
        ("post", "/api/v1/sdk/tokens", {"days": "30"}, "days"),
    ],
)
def test_json_types_are_not_coerced(api_client, alice, lab, method, url, body, field):
    answer = send(api_client(alice), method, url.format(exp=lab.pk), body)
    assert answer.status_code == 400, answer.content
    assert field in fields(answer)
    assert not SavedView.objects.exists()


def test_a_whole_number_still_stands_for_a_float(api_client, alice, lab):
    answer = send(api_client(alice), "post", "/api/v1/projects/lab/views", {"name": "v", "state": {"smooth": 0}})
    assert answer.status_code == 201


@pytest.mark.parametrize(
    "method,url,allowed",
    [
        ("TRACE", "/api/v1/runs/{run}/metrics/keys", "GET"),
        ("TRACE", "/api/v1/metrics/compare", "GET"),
        ("TRACE", "/api/v1/runs/{run}/metrics/stream", "GET"),
        ("TRACE", "/api/v1/runs", "GET"),
        ("POST", "/api/v1/runs/{run}/metrics/keys", "GET"),
        ("PUT", "/api/v1/projects/lab/views", "GET, POST"),
    ],
)
def test_a_method_the_document_does_not_list_is_a_405_naming_those_it_does(
    api_client, alice, lab, method, url, allowed
):
    answer = api_client(alice).generic(method, url.format(run=lab.runs.get().pk))
    assert answer.status_code == 405
    assert answer["Allow"] == allowed and answer["Content-Type"].startswith("application/json")


def test_every_input_string_refuses_nul_in_the_document_as_the_server_does(api_client, alice, lab):
    doc = document()
    notes = doc["components"]["schemas"]["ExperimentIn"]["properties"]["notes"]
    assert re.fullmatch(notes["pattern"], "plain notes") and not re.search(notes["pattern"], "a\x00b")
    tag = next(p for p in doc["paths"]["/api/v1/runs"]["get"]["parameters"] if p["name"] == "tag")
    assert tag["schema"]["pattern"] == notes["pattern"]
    answer = send(api_client(alice), "patch", f"/api/v1/runs/{lab.runs.get().pk}", {"notes": "a\x00b"})
    assert answer.status_code == 400
    assert api_client(alice).get("/api/v1/runs", {"tag": "a\x00b"}).status_code == 400
