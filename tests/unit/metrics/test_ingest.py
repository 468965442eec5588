import json

import pytest
from django.db import connection  # noqa: F401 (skipif expressions)
from django.db.models import Sum

from orchestrator.metrics.chunks import live_rows
from orchestrator.metrics.models import MetricChunk, MetricSeries, Special
from orchestrator.metrics.selectors import latest_values, series, summaries

from .helpers import T0, make_run, points, push, start_attempt

pytestmark = pytest.mark.django_db

POINTS = {
    "points": [
        {"step": 1, "key": "train/reward_mean", "value": 0.25, "time": T0},
        {"step": 2, "key": "train/reward_mean", "value": "NaN", "time": T0 + 1},
    ]
}


def stored(run, key="train/reward_mean"):
    return live_rows(run.pk, key)


def test_points_are_stored_once_even_when_sent_twice(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    assert push(client, run.pk, token, POINTS).status_code == 202
    assert push(client, run.pk, token, POINTS).status_code == 202
    assert stored(run) == [(1, 0.25, Special.FINITE), (2, None, Special.NAN)]


def test_a_step_posted_twice_in_one_batch_keeps_the_last_value(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    body = {
        "points": points("actor/m2", [3, 3], value=lambda s: 1.0)
        + [{"step": 3, "key": "actor/m2", "value": 2.0, "time": T0}]
    }
    assert push(client, run.pk, token, body).status_code == 202
    assert stored(run, "actor/m2") == [(3, 2.0, 0)]


def test_non_finite_values_are_kept_and_served_as_strings(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    body = {
        "points": [
            {"step": s, "key": "actor/grad_norm", "value": v, "time": T0 + s}
            for s, v in [(0, 1.5), (1, "NaN"), (2, "Infinity"), (3, "-Infinity"), (4, 2.5)]
        ]
    }
    assert push(client, run.pk, token, body).status_code == 202
    client.force_login(alice)
    answer = client.get(f"/api/v1/runs/{run.pk}/metrics", {"key": "actor/grad_norm"}).json()
    assert answer["points"] == [[0, 1.5], [1, "NaN"], [2, "Infinity"], [3, "-Infinity"], [4, 2.5]]
    summary = summaries([run.pk])[run.pk]["actor/grad_norm"]
    assert (summary["min"], summary["max"], summary["last"]) == (1.5, 2.5, 2.5)


@pytest.mark.parametrize("token,status", [(None, 401), ("oplrun_wrong", 404)])
def test_missing_or_wrong_token_is_refused_and_stores_nothing(client, alice, tiny_config, token, status):
    run, _ = make_run(alice, tiny_config)
    assert push(client, run.pk, token, POINTS).status_code == status
    assert MetricChunk.objects.count() == 0


def test_a_runs_token_cannot_write_another_run(client, alice, tiny_config):
    run_a, token_a = make_run(alice, tiny_config)
    run_b, _ = make_run(alice, tiny_config)
    assert push(client, run_b.pk, token_a, POINTS).status_code == 404  # as if run_b did not exist
    assert MetricChunk.objects.count() == 0


def test_an_old_attempts_token_is_refused_after_a_restart(client, alice, tiny_config):
    run, old_token = make_run(alice, tiny_config)
    start_attempt(run, 2)
    assert push(client, run.pk, old_token, {"attempt": 1, **POINTS}).status_code == 404


def test_a_batch_for_another_attempt_is_refused(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    response = push(client, run.pk, token, {"attempt": 2, **POINTS})
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "attempt"


def test_bad_points_are_refused_one_by_one_and_the_rest_is_stored(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    body = {
        "points": [
            POINTS["points"][0],
            {"step": -1, "key": "a", "value": 1, "time": 0},
            {"step": 3, "key": "bad\x07key", "value": 2, "time": 0},
            {"step": 4, "key": "a", "value": True, "time": 0},
            {"step": 5, "key": "a", "value": None, "time": 0},
            {"step": 3.7, "key": "a", "value": 1, "time": 0},
            {"step": 6, "key": "a", "value": 6.0, "time": T0},
        ]
    }
    response = push(client, run.pk, token, body)
    assert response.status_code == 202, response.content
    answer = response.json()
    assert answer["stored"] == 2
    refused = {r["index"]: r for r in answer["refused"]}
    assert sorted(refused) == [1, 2, 3, 4, 5]
    assert (refused[2]["key"], refused[2]["step"]) == ("bad\x07key", 3)
    assert "U+0007" in refused[2]["reason"]
    assert "null" in refused[4]["reason"] and "whole number" in refused[5]["reason"]
    assert answer["refused_keys"] == {"a": 4, "bad\x07key": 1}
    assert stored(run) == [(1, 0.25, Special.FINITE)]
    assert stored(run, "a") == [(6, 6.0, Special.FINITE)]


@pytest.mark.parametrize("key", ["train/loss\n", "train/loss\n\n", "train/lo\nss", "\ntrain/loss"])
def test_a_key_with_a_newline_is_refused_on_every_path(client, alice, tiny_config, key):
    """Python's `$` matches before a final newline: "train/loss\\n" was stored, but every read strips
    the key, so its series could never be read back. Refused point by point, on both wire paths."""
    run, token = make_run(alice, tiny_config)
    rows = points(key, [1, 2]) + points("train/fine", [1])
    for body in ({"points": rows}, {"attempt": 1, "points": rows[:2]}):  # msgspec's path and the plain one
        response = push(client, run.pk, token, body)
        assert response.status_code == 202, response.content
        assert {(e["index"], e["field"]) for e in response.json()["refused"]} == {(0, "key"), (1, "key")}
    assert set(MetricChunk.objects.values_list("key", flat=True)) == {"train/fine"}


ODD_KEYS = [
    "Accuracy (val)",
    "grpo-7b - train/reward",
    "train/rewards/<lambda>/mean",
    "100% done #3",
    "Genauigkeit/Größe",
    "报酬/平均",
    "a,b [x]",
    " padded ",
    "k" * 256,
]


def test_any_printable_key_and_64_bit_steps_are_stored_exactly_and_read_back(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    big = 3_000_000_000
    rows = [{"step": big + i, "key": key, "value": float(i), "time": T0} for i, key in enumerate(ODD_KEYS)]
    refused_too = [{"step": 1, "key": "x", "value": None, "time": T0}]
    for body in ({"points": rows}, {"attempt": 1, "points": rows + refused_too}):  # both wire paths
        answer = push(client, run.pk, token, body)
        assert answer.status_code == 202 and answer.json()["stored"] == len(ODD_KEYS), answer.content
    client.force_login(alice)
    for i, key in enumerate(ODD_KEYS):
        got = client.get(f"/api/v1/runs/{run.pk}/metrics", {"key": key})
        assert got.status_code == 200, (key, got.content)
        assert got.json()["points"] == [[big + i, float(i)]]
    assert set(MetricSeries.objects.filter(run=run).values_list("key", flat=True)) == set(ODD_KEYS)


@pytest.mark.parametrize("key", ["", "k" * 257, "a\u202eb", "tab\there", "del\x7f", "c1\x85"])
def test_keys_that_cannot_be_shown_faithfully_are_refused_per_point(client, alice, tiny_config, key):
    run, token = make_run(alice, tiny_config)
    rows = points("train/fine", [1]) + [{"step": 2, "key": key, "value": 1.0, "time": T0}]
    answer = push(client, run.pk, token, {"points": rows})
    assert answer.status_code == 202
    assert [(r["index"], r["field"]) for r in answer.json()["refused"]] == [(1, "key")]
    assert stored(run, "train/fine") == [(1, 0.1, 0)]


def test_steps_are_64_bit_up_to_what_a_browser_holds_exactly_and_beyond_that_refused_per_point(
    client, alice, tiny_config
):
    run, token = make_run(alice, tiny_config)
    rows = [
        {"step": 0, "key": "tok", "value": 0.5, "time": T0},
        {"step": 2**53 - 1, "key": "tok", "value": 1.0, "time": T0},
        {"step": 2**53, "key": "tok", "value": 2.0, "time": T0},
    ]
    answer = push(client, run.pk, token, {"points": rows}).json()
    assert answer["stored"] == 2 and [r["index"] for r in answer["refused"]] == [2]
    assert stored(run, "tok") == [(0, 0.5, 0), (2**53 - 1, 1.0, 0)]
    client.force_login(alice)
    got = client.get(f"/api/v1/runs/{run.pk}/metrics", {"key": "tok"}).json()
    assert got["points"] == [[0, 0.5], [2**53 - 1, 1.0]]


def test_a_heartbeat_takes_a_64_bit_step(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    answer = client.post(
        f"/api/v1/runs/{run.pk}/heartbeat",
        data=json.dumps({"step": 5_000_000_000, "total_steps": 9_000_000_000}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert answer.status_code in (200, 204), answer.content
    run.refresh_from_db()
    assert (run.step, run.total_steps) == (5_000_000_000, 9_000_000_000)


def test_points_that_are_not_a_list_are_refused(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    response = push(client, run.pk, token, {"points": {"step": 1}})
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "points"


def test_unknown_run_is_404(client):
    assert push(client, 987654, "oplrun_x", POINTS).status_code == 404


def test_restart_supersedes_the_old_attempt_from_the_restart_step(client, alice, tiny_config):
    run, token1 = make_run(alice, tiny_config)
    push(client, run.pk, token1, {"attempt": 1, "points": points("train/reward_mean", range(10))})
    run, token2 = start_attempt(run, 2)  # resumed from the checkpoint at step 5
    body = {"attempt": 2, "points": points("train/reward_mean", range(5, 8), value=lambda s: 100 + s)}
    assert push(client, run.pk, token2, body).status_code == 202

    client.force_login(alice)
    answer = client.get(f"/api/v1/runs/{run.pk}/metrics", {"key": "train/reward_mean"}).json()
    assert answer["points"] == [[s, s / 10] for s in range(5)] + [[s, 100 + s] for s in range(5, 8)]
    assert answer["attempts"] == [[1, 0], [2, 5]]
    # the old attempt's points are kept, marked superseded, not deleted
    assert MetricChunk.objects.filter(run=run, attempt=1, superseded=True).aggregate(n=Sum("n"))["n"] == 5
    assert latest_values([run.pk], ["train/reward_mean"]) == {run.pk: {"train/reward_mean": 107.0}}
    s = MetricSeries.objects.get(run=run, key="train/reward_mean")
    assert (s.first_step, s.last_step, s.min_value, s.max_value) == (0, 7, 0.0, 107.0)


def test_backfill_after_an_outage_gives_the_same_result_as_no_outage(client, alice, tiny_config):
    batches = [
        {
            "attempt": 1,
            "points": points("train/reward_mean", range(i * 5, i * 5 + 5))
            + points("eval/avg_acc", [i * 5], value=lambda s: s / 100),
        }
        for i in range(6)
    ]
    steady, token_a = make_run(alice, tiny_config, name="steady")
    for body in batches:
        assert push(client, steady.pk, token_a, body).status_code == 202
    flaky, token_b = make_run(alice, tiny_config, name="flaky")
    for body in batches[:2]:
        push(client, flaky.pk, token_b, body)
    # the trainer lost the dashboard after batch 2 (its answer never arrived) and spooled the
    # rest; when it reconnects it replays the spool from the last unacknowledged batch
    for body in batches[1:]:
        assert push(client, flaky.pk, token_b, body).status_code == 202

    for key in ("train/reward_mean", "eval/avg_acc"):
        assert stored(flaky, key) == stored(steady, key)
        assert series([flaky.pk], key)[flaky.pk] == series([steady.pk], key)[steady.pk]
    assert summaries([flaky.pk])[flaky.pk] == summaries([steady.pk])[steady.pk]


def test_latest_values_for_a_runs_table(client, alice, tiny_config):
    run_a, token_a = make_run(alice, tiny_config, name="a")
    run_b, token_b = make_run(alice, tiny_config, name="b")
    push(client, run_a.pk, token_a, {"points": points("train/reward_mean", [1, 2])})
    push(client, run_b.pk, token_b, {"points": points("eval/avg_acc", [3]) + points("train/reward_mean", [9, 4])})
    values = latest_values([run_a.pk, run_b.pk], ["train/reward_mean", "eval/avg_acc", "actor/m2"])
    assert values == {run_a.pk: {"train/reward_mean": 0.2}, run_b.pk: {"train/reward_mean": 0.9, "eval/avg_acc": 0.3}}


def test_a_repost_replaces_only_the_steps_it_sends(alice, tiny_config):
    from orchestrator.metrics.services import metrics_ingest

    run, _ = make_run(alice, tiny_config)
    metrics_ingest(run=run, attempt=1, points=points("actor/m2", [1, 2, 3]))
    metrics_ingest(run=run, attempt=1, points=points("actor/m2", [2, 4], value=lambda s: 9.0))
    assert stored(run, "actor/m2") == [(1, 0.1, 0), (2, 9.0, 0), (3, 0.3, 0), (4, 9.0, 0)]
    s = MetricSeries.objects.get(run=run, key="actor/m2")
    assert (s.first_step, s.last_step, s.last_value, s.min_value, s.max_value) == (1, 4, 9.0, 0.1, 9.0)
    # covering every step of the first chunk empties it: it goes, and no empty chunk is left
    metrics_ingest(run=run, attempt=1, points=points("actor/m2", [1, 3], value=lambda s: -1.0))
    assert stored(run, "actor/m2") == [(1, -1.0, 0), (2, 9.0, 0), (3, -1.0, 0), (4, 9.0, 0)]
    assert sorted(MetricChunk.objects.filter(run=run).values_list("first_step", "last_step", "n")) == [
        (1, 3, 2),
        (2, 4, 2),
    ]
    s = MetricSeries.objects.get(run=run, key="actor/m2")
    assert (s.last_value, s.min_value, s.max_value) == (9.0, -1.0, 9.0)
