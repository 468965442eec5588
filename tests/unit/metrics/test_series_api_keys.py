"""The metrics API: several keys per call, a 404 that names the known keys for a key
the run does not have; the compare call takes several keys too, within a cap on runs x
keys said out loud."""

import pytest

from orchestrator.metrics.services import metrics_ingest

from .helpers import make_run, points

pytestmark = pytest.mark.django_db
A, B = "train/reward_mean", "actor/m2"


def test_several_keys_in_one_call_come_back_in_the_order_asked(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    metrics_ingest(run=run, attempt=1, points=points(A, range(3)) + points(B, range(2), lambda s: 7.0))
    client.force_login(alice)
    url = f"/api/v1/runs/{run.pk}/metrics"
    for query in ({"key": [B, A]}, {"key": f"{B},{A}"}):
        answer = client.get(url, query)
        assert answer.status_code == 200
        body = answer.json()
        assert [s["key"] for s in body["series"]] == [B, A]
        assert body["series"][0]["points"] == [[0, 7.0], [1, 7.0]]
        assert "key" not in body and body["attempts"] == [[1, 0]]
    single = client.get(url, {"key": A}).json()  # one key keeps its old shape too
    assert single["key"] == A and single["points"] == single["series"][0]["points"]


def test_an_unknown_key_is_a_404_naming_the_known_ones(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    client.force_login(alice)
    url = f"/api/v1/runs/{run.pk}/metrics"
    empty = client.get(url, {"key": A})
    assert empty.status_code == 404 and "no metrics reported yet" in empty.json()["error"]
    metrics_ingest(run=run, attempt=1, points=points(A, range(3)) + points(B, range(2)))
    answer = client.get(url, {"key": [A, "train/reward_maen"]})
    assert answer.status_code == 404
    assert answer.json()["error"] == (
        f"run {run.pk} has no metric 'train/reward_maen'; known keys: {A}, {B}"
    )  # the key the typo meant first
    assert answer.json()["errors"] == [{"field": "key", "message": f"known keys: {A}, {B}"}]
    compare = client.get("/api/v1/metrics/compare", {"runs": str(run.pk), "key": "nope"})
    assert compare.status_code == 404 and f"known keys: {B}, {A}" in compare.json()["error"]


def test_the_nearest_keys_come_first_when_a_run_logs_more_than_are_named(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)  # a real trainer logs ~70 keys, and actor/* sort before train/*
    many = [f"actor/diag_{i:02d}" for i in range(60)]
    metrics_ingest(run=run, attempt=1, points=[p for key in many + [A] for p in points(key, range(1))])
    client.force_login(alice)
    error = client.get(f"/api/v1/runs/{run.pk}/metrics", {"key": "train/reward"}).json()["error"]
    assert error.split("known keys: ")[1].startswith(f"{A}, actor/diag_00") and error.endswith("and 21 more")


def test_compare_answers_several_keys_in_the_order_asked_within_its_runs_x_keys_cap(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)  # a page's first panels come in one call
    metrics_ingest(run=run, attempt=1, points=points(A, range(3)) + points(B, range(2), lambda s: 7.0))
    client.force_login(alice)
    url = "/api/v1/metrics/compare"
    for query in ({"runs": str(run.pk), "key": [B, A]}, {"runs": str(run.pk), "key": f"{B},{A}"}):
        body = client.get(url, query).json()
        assert [s["key"] for s in body["series"]] == [B, A] and "key" not in body and "runs" not in body
        assert body["series"][0]["runs"] == [{"run": run.pk, "points": [[0, 7.0], [1, 7.0]], "attempts": [[1, 0]]}]
    single = client.get(url, {"runs": str(run.pk), "key": A}).json()  # one key keeps its old shape too
    assert single["key"] == A and single["runs"] == single["series"][0]["runs"]
    too_many = client.get(url, {"runs": ",".join(str(run.pk + i) for i in range(100)), "key": [A, B, "c"]})
    assert too_many.status_code == 400
    cap = "at most 200 series (runs x keys) per call, got 100 x 3"
    assert too_many.json()["errors"] == [{"field": "key", "message": cap}]


def test_the_openapi_document_describes_several_keys_and_the_404(client):
    doc = client.get("/api/v1/openapi.json").json()
    get = doc["paths"]["/api/v1/runs/{run_id}/metrics"]["get"]
    [key] = [p for p in get["parameters"] if p["name"] == "key"]
    assert key["schema"]["type"] == "array" and key["explode"] is True and "404" in key["description"]
    assert "404" in get["responses"]
    series = doc["components"]["schemas"]["Series"]
    assert series["required"] == ["series", "seq", "attempts"] and "optimizer update" in series["description"]
    compare = doc["paths"]["/api/v1/metrics/compare"]["get"]
    [key] = [p for p in compare["parameters"] if p["name"] == "key"]
    assert key["schema"]["type"] == "array" and "runs x keys" in compare["summary"]
    assert doc["components"]["schemas"]["CompareSeries"]["required"] == ["series"]
