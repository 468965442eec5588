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
    return client.post(
        f"/api/v1/runs/{run_id}/metrics",
        data=body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_CONTENT_ENCODING=encoding,
    )


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
    assert response.status_code == 202 and response.json()["refused"][0]["field"] == "step"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body,encoding,status,words",
    [
        (b"not gzip at all", "gzip", 400, "not valid gzip"),
        (gzip.compress(b'{"points": []}')[:-6], "gzip", 400, "not a complete gzip"),
        (b"{}", "br", 415, "'br' is not supported"),
    ],
)
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
@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="holds a PostgreSQL row lock from a second connection")
def test_a_batch_lock_held_too_long_answers_429_and_the_retry_is_stored(client, alice, tiny_config, settings):
    settings.OPL_INGEST_LOCK_TIMEOUT_MS = 200
    run, token = make_run(alice, tiny_config)
    assert push(client, run.pk, token, {"points": points(KEY, [0])}).status_code == 202
    params = connection.get_connection_params()
    with psycopg.connect(
        **{k: v for k, v in params.items() if k in ("dbname", "user", "host", "port", "password")}
    ) as other:
        other.execute("SELECT 1 FROM metrics_metricstream WHERE run_id = %s FOR UPDATE", [run.pk])  # a long batch
        for steps in ([1, 2], [0]):  # an append (pipelined path) and a re-post (general path)
            response = push(client, run.pk, token, {"points": points(KEY, steps)})
            assert response.status_code == 429 and int(response["Retry-After"]) >= 1
            assert "lock" in response.json()["error"]
    assert [s for s, _, _ in live_rows(run.pk, KEY)] == [0]
    assert push(client, run.pk, token, {"points": points(KEY, [1, 2])}).status_code == 202
    assert [s for s, _, _ in live_rows(run.pk, KEY)] == [0, 1, 2]


# --- limits named in a JSON 413, and the token checked before the body is read ----------


def _json_413(response, setting):
    assert response.status_code == 413 and response["Content-Type"] == "application/json", response.content[:200]
    assert setting in response.json()["error"]


@pytest.mark.django_db
def test_a_metrics_body_over_the_limit_is_a_json_413_naming_it(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    body = {"attempt": 1, "points": points("train/reward_mean", range(40_000))}  # ~3 MB: over the default 2.5 MiB
    response = push(client, run.pk, token, body)
    _json_413(response, "the limit is 2,621,440 bytes (OPL_INGEST_MAX_BODY_BYTES)")
    assert MetricChunk.objects.count() == 0


@pytest.mark.django_db
def test_a_samples_batch_of_a_valid_config_over_the_limit_is_a_json_413(client, alice, tiny_config):
    """samples.per_step 64 x samples.max_tokens 4,096: about 2.9 MB even gzipped."""
    from orchestrator.samples.models import RolloutSample
    from tests.unit.samples.helpers import batch, long_sample, post

    run, token = make_run(alice, tiny_config)
    body = gzip.compress(json.dumps(batch([long_sample(1, i) for i in range(64)])).encode(), 1)
    assert len(body) > 2_621_440
    _json_413(post(client, run.pk, token, body, gzipped=False, encoding="gzip"), "OPL_INGEST_MAX_BODY_BYTES")
    assert RolloutSample.objects.count() == 0


@pytest.mark.django_db
def test_a_gzip_body_inflating_far_past_its_size_is_a_413_naming_the_ratio(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    bomb = gzip.compress(b'{"points": [' + b" " * (30 << 20) + b"]}", 9)  # ~30 KB that inflates 1,000x
    _json_413(push_gzip(client, run.pk, token, bomb), "OPL_INGEST_MAX_INFLATE_RATIO allows 100x")


@pytest.mark.django_db
def test_the_token_is_checked_before_the_queue_the_size_and_the_gzip(client, alice, tiny_config, settings):
    """An anonymous or foreign post is refused on its headers: it never takes one of the run's queue
    places (16 anonymous gzip bombs once starved the real trainer) nor has its body read."""
    settings.OPL_INGEST_MAX_QUEUED = 1
    settings.OPL_INGEST_MAX_BODY_BYTES = 1000
    run, token = make_run(alice, tiny_config)
    other, other_token = make_run(alice, tiny_config, name="other")
    big_bomb = gzip.compress(b" " * (8 << 20))  # over the size limit, and a bomb
    with ingest_queue.slot(run.pk):  # the run's one place is taken
        for path in ("metrics", "samples"):
            url = f"/api/v1/runs/{run.pk}/{path}"
            for auth, status in (({}, 401), ({"HTTP_AUTHORIZATION": f"Bearer {other_token}"}, 404)):
                for body in (b"not gzip", big_bomb):
                    answer = client.post(
                        url, data=body, content_type="application/json", HTTP_CONTENT_ENCODING="gzip", **auth
                    )
                    assert answer.status_code == status, (path, auth, answer.content[:200])
            real = client.post(url, data=b"{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
            assert real.status_code == 429  # only the run's own token reaches the queue
        _json_413(push_gzip(client, run.pk, token, big_bomb), "OPL_INGEST_MAX_BODY_BYTES")  # size: before the queue
    assert push(client, run.pk, token, {"points": points(KEY, [1])}).status_code == 202
