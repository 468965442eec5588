"""The ingestion endpoint under load and with compressed bodies: gzip accepted, 429 with
Retry-After when a run's queue is deep or its batch lock is held too long, nothing stored then."""
import gzip
import json

import psycopg
import pytest
from django.db import connection

from orchestrator.metrics import ingest_queue
from orchestrator.metrics.chunks import live_rows
from orchestrator.metrics.models import MetricChunk

from .helpers import make_run, points, push

KEY = "train/reward_mean"


def push_gzip(client, run_id, token, body: bytes, encoding="gzip"):
    return client.post(f"/api/v1/runs/{run_id}/metrics", data=body, content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_CONTENT_ENCODING=encoding)


@pytest.mark.django_db
def test_a_gzip_body_is_stored_like_a_plain_one(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    body = gzip.compress(json.dumps({"attempt": 1, "points": points(KEY, range(5))}).encode())
    assert push_gzip(client, run.pk, token, body).status_code == 202
    assert [s for s, _, _ in live_rows(run.pk, KEY)] == [0, 1, 2, 3, 4]


@pytest.mark.django_db
def test_a_gzip_body_with_a_bad_row_is_explained_like_a_plain_one(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    body = gzip.compress(json.dumps({"points": [{"step": -1, "key": KEY, "value": 1, "time": 0}]}).encode())
    response = push_gzip(client, run.pk, token, body)
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "step"


@pytest.mark.django_db
@pytest.mark.parametrize("body,encoding,status,words", [
    (b"not gzip at all", "gzip", 400, "not valid gzip"),
    (gzip.compress(b'{"points": []}')[:-6], "gzip", 400, "not a complete gzip"),
    (b"{}", "br", 415, "'br' is not supported"),
])
def test_bad_encodings_are_refused_with_a_reason(client, alice, tiny_config, body, encoding, status, words):
    run, token = make_run(alice, tiny_config)
    response = push_gzip(client, run.pk, token, body, encoding)
    assert response.status_code == status and words in response.json()["error"]
    assert MetricChunk.objects.count() == 0


@pytest.mark.django_db
def test_a_gzip_bomb_is_refused(client, alice, tiny_config, settings):
    settings.OPL_INGEST_MAX_INFLATED_BYTES = 1000
    run, token = make_run(alice, tiny_config)
    response = push_gzip(client, run.pk, token, gzip.compress(b" " * 5000))
    assert response.status_code == 413


@pytest.mark.django_db
def test_a_full_queue_answers_429_with_retry_after_and_stores_nothing(client, alice, tiny_config, settings):
    settings.OPL_INGEST_MAX_QUEUED = 2
    run, token = make_run(alice, tiny_config)
    with ingest_queue.slot(run.pk), ingest_queue.slot(run.pk):  # two batches of this run in the process
        response = push(client, run.pk, token, {"points": points(KEY, [1])})
        assert push(client, run.pk + 1000, token, {"points": points(KEY, [1])}).status_code == 404  # other runs pass
    assert response.status_code == 429 and response["Retry-After"] == "1"
    assert MetricChunk.objects.count() == 0
    assert push(client, run.pk, token, {"points": points(KEY, [1])}).status_code == 202  # places freed


@pytest.mark.django_db(transaction=True)
def test_a_batch_lock_held_too_long_answers_429_and_the_retry_is_stored(client, alice, tiny_config, settings):
    settings.OPL_INGEST_LOCK_TIMEOUT_MS = 200
    run, token = make_run(alice, tiny_config)
    assert push(client, run.pk, token, {"points": points(KEY, [0])}).status_code == 202
    params = connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in params.items() if k in ("dbname", "user", "host", "port", "password")}) as other:
        other.execute("SELECT 1 FROM metrics_metricstream WHERE run_id = %s FOR UPDATE", [run.pk])  # a long batch
        for steps in ([1, 2], [0]):  # an append (pipelined path) and a re-post (general path)
            response = push(client, run.pk, token, {"points": points(KEY, steps)})
            assert response.status_code == 429 and int(response["Retry-After"]) >= 1
            assert "lock" in response.json()["error"]
    assert [s for s, _, _ in live_rows(run.pk, KEY)] == [0]
    assert push(client, run.pk, token, {"points": points(KEY, [1, 2])}).status_code == 202
    assert [s for s, _, _ in live_rows(run.pk, KEY)] == [0, 1, 2]
