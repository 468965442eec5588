import json
import math

import pytest

from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create
from orchestrator.experiments.tokens import derive_token, token_hash
from orchestrator.metrics.models import MetricPoint

pytestmark = pytest.mark.django_db


def make_run(owner, config) -> tuple[Run, str]:
    run = experiment_create(owner=owner, name="exp", config=config).runs.get()
    run.attempt, run.token_salt, run.state = 1, "salt", Run.State.RUNNING
    token = derive_token(run.pk, 1, "salt")
    run.token_hash = token_hash(token)
    run.save()
    return run, token


def push(client, run_id, token, body):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.post(f"/api/v1/runs/{run_id}/metrics", data=json.dumps(body),
                       content_type="application/json", **headers)


POINTS = {"points": [{"step": 1, "key": "train/reward_mean", "value": 0.25, "time": 1764400000.0},
                     {"step": 2, "key": "train/reward_mean", "value": "NaN", "time": 1764400001.0}]}


def test_points_are_stored_once_even_when_sent_twice(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    assert push(client, run.pk, token, POINTS).status_code == 202
    assert push(client, run.pk, token, POINTS).status_code == 202
    values = dict(MetricPoint.objects.filter(run=run).values_list("step", "value"))
    assert values[1] == 0.25 and math.isnan(values[2]) and len(values) == 2


@pytest.mark.parametrize("token,status", [(None, 401), ("oplrun_wrong", 403)])
def test_missing_or_wrong_token_is_refused_and_stores_nothing(client, alice, tiny_config, token, status):
    run, _ = make_run(alice, tiny_config)
    assert push(client, run.pk, token, POINTS).status_code == status
    assert MetricPoint.objects.count() == 0


def test_a_runs_token_cannot_write_another_run(client, alice, tiny_config):
    run_a, token_a = make_run(alice, tiny_config)
    run_b, _ = make_run(alice, tiny_config)
    assert push(client, run_b.pk, token_a, POINTS).status_code == 403
    assert MetricPoint.objects.count() == 0


def test_batch_with_bad_rows_is_refused_whole(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    body = {"points": [POINTS["points"][0], {"step": -1, "key": "a", "value": 1, "time": 0},
                       {"step": 3, "key": "bad key!", "value": "x", "time": 0}]}
    response = push(client, run.pk, token, body)
    assert response.status_code == 400
    assert sorted({e["index"] for e in response.json()["errors"]}) == [1, 2]
    assert MetricPoint.objects.count() == 0


def test_unknown_run_is_404(client):
    assert push(client, 987654, "oplrun_x", POINTS).status_code == 404
