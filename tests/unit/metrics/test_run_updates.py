"""What a run reports besides points, through POST /api/v1/runs/<id>/updates with its own token
(W&B's config.update, summary, define_metric, alert, Histogram and Table), read back through the
run API, the runs table, the alerts API, the histogram and table reads and the samples API."""

import json

import pytest
from django.test import Client

from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import Run
from orchestrator.samples.models import RolloutSample

from .helpers import T0, make_run, points, push

pytestmark = pytest.mark.django_db


def post(path: str, body, token: str | None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return Client().post(path, json.dumps(body), content_type="application/json", **headers)


@pytest.fixture
def sdk_run(alice):
    _, logging_token = logging_token_create(user=alice)
    body = {
        "client_id": "client-updates-1",
        "name": "wandb-script",
        "project": "lab",
        "config": {"optim": {"lr": 1e-3}},
    }
    answer = post("/api/v1/sdk/runs", body, logging_token).json()
    return Run.objects.get(pk=answer["id"]), answer["token"]


def update(run, token, body):
    return post(f"/api/v1/runs/{run.pk}/updates", body, token)


def test_config_updates_merge_into_nested_sections(sdk_run):
    run, token = sdk_run
    assert update(run, token, {"kind": "config", "config": {"optim": {"beta": 0.9}, "epochs": 3}}).json() == {
        "ok": True
    }
    run.refresh_from_db()
    assert run.config == {"optim": {"lr": 1e-3, "beta": 0.9}, "epochs": 3}


def test_summary_values_show_in_the_run_api_and_as_runs_table_columns(sdk_run, alice):
    run, token = sdk_run
    rows = points("eval/acc", [1, 2, 3], value=lambda s: [0.5, 0.9, 0.7][s - 1])
    assert push(Client(), run.pk, token, {"points": rows}).status_code == 202
    assert update(run, token, {"kind": "define_metric", "name": "eval/acc", "summary": "max"}).status_code == 200
    assert update(run, token, {"kind": "summary", "summary": {"best epoch": 7, "note": "ok"}}).status_code == 200
    client = Client()
    client.force_login(alice)
    summary = client.get(f"/api/v1/runs/{run.pk}").json()["summary"]
    assert summary["best epoch"] == {"value": 7} and summary["note"] == {"value": "ok"}
    assert summary["eval/acc"]["value"] == 0.9 and summary["eval/acc"]["last"] == 0.7
    html = client.get("/", {"cols": "best epoch"}).content.decode()
    assert '<td class="num">7</td>' in html


def test_a_mean_summary_is_the_mean_of_every_logged_value(sdk_run, alice):
    run, token = sdk_run
    push(Client(), run.pk, token, {"points": points("loss", [1, 2, 3, 4], value=lambda s: float(s))})
    update(run, token, {"kind": "define_metric", "name": "loss", "step_metric": "epoch", "summary": "mean"})
    client = Client()
    client.force_login(alice)
    assert client.get(f"/api/v1/runs/{run.pk}").json()["summary"]["loss"]["value"] == 2.5


def test_an_alert_from_the_trainer_is_an_alert_on_the_run_and_may_repeat(sdk_run, alice):
    run, token = sdk_run
    assert (
        update(
            run, token, {"kind": "alert", "title": "Low accuracy", "text": "acc 0.1 < 0.5", "level": "warn"}
        ).status_code
        == 200
    )
    assert update(run, token, {"kind": "alert", "title": "Still low"}).status_code == 200
    client = Client()
    client.force_login(alice)
    alerts = client.get(f"/api/v1/runs/{run.pk}/alerts").json()["alerts"]
    assert sorted(a["message"] for a in alerts) == ["Still low", "[warn] Low accuracy: acc 0.1 < 0.5"]
    assert {a["kind"] for a in alerts} == {"trainer"}


def test_histograms_are_stored_and_read_back_by_key(sdk_run, alice):
    run, token = sdk_run
    for step in (2, 1):
        body = {"kind": "histogram", "key": "grads/layer 0", "step": step, "bins": [0, 1, 2], "counts": [step, 4]}
        assert update(run, token, body).status_code == 200
    client = Client()
    client.force_login(alice)
    answer = client.get(f"/api/v1/runs/{run.pk}/histograms", {"key": "grads/layer 0"}).json()
    assert answer["histograms"] == [
        {"step": 1, "bins": [0, 1, 2], "counts": [1, 4]},
        {"step": 2, "bins": [0, 1, 2], "counts": [2, 4]},
    ]
    assert client.get(f"/api/v1/runs/{run.pk}/histograms").json() == {"keys": ["grads/layer 0"]}
    assert client.get(f"/api/v1/runs/{run.pk}/histograms", {"key": "nope"}).status_code == 404


def test_a_table_with_prompts_and_responses_also_becomes_samples(sdk_run, alice):
    run, token = sdk_run
    body = {
        "kind": "table",
        "key": "eval/completions",
        "step": 5,
        "columns": ["Prompt", "completion", "reward"],
        "rows": [["2+2?", "4", 1.0], ["3+3?", "7", 0.0]],
    }
    assert update(run, token, body).json() == {"ok": True, "samples": 2}
    client = Client()
    client.force_login(alice)
    tables = client.get(f"/api/v1/runs/{run.pk}/tables", {"key": "eval/completions"}).json()["tables"]
    assert tables == [{"step": 5, "columns": body["columns"], "rows": body["rows"]}]
    samples = RolloutSample.objects.filter(run=run).order_by("index")
    assert [(s.kind, s.step, s.prompt, s.response, s.reward) for s in samples] == [
        ("eval", 5, "2+2?", "4", 1.0),
        ("eval", 5, "3+3?", "7", 0.0),
    ]


def test_a_table_without_prompt_and_response_stays_a_table(sdk_run):
    run, token = sdk_run
    body = {"kind": "table", "key": "confusion", "step": 0, "columns": ["a", "b"], "rows": [[1, 2]]}
    assert update(run, token, body).json() == {"ok": True, "samples": 0}
    assert not RolloutSample.objects.filter(run=run).exists()


@pytest.mark.parametrize(
    "body,field",
    [
        ({"kind": "nope"}, "kind"),
        ({"kind": "summary", "summary": {"bad\nkey": 1}}, "summary"),
        ({"kind": "histogram", "key": "h", "step": 0, "bins": [0, 1], "counts": [1, 2]}, "bins"),
        ({"kind": "histogram", "key": "h", "step": 0, "bins": [1, 0], "counts": [1]}, "bins"),
        ({"kind": "table", "key": "t", "step": 0, "columns": ["a"], "rows": [[1, 2]]}, "rows.0"),
        ({"kind": "define_metric", "name": "x", "summary": "median"}, "summary"),
        ({"kind": "alert", "title": ""}, "title"),
        ([], "(body)"),
    ],
)
def test_a_bad_update_is_a_400_naming_the_field(sdk_run, body, field):
    run, token = sdk_run
    answer = update(run, token, body)
    assert answer.status_code == 400, answer.content
    assert answer.json()["errors"][0]["field"] == field


def test_only_the_runs_own_token_writes_updates(sdk_run, alice, tiny_config):
    run, _ = sdk_run
    _, other_token = make_run(alice, tiny_config)
    # another run's token gets the answer of a run that does not exist
    assert update(run, other_token, {"kind": "summary", "summary": {"a": 1}}).status_code == 404
    assert update(run, None, {"kind": "summary", "summary": {"a": 1}}).status_code == 401


def test_a_cluster_runs_config_is_not_rewritten(alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    assert update(run, token, {"kind": "config", "config": {"x": 1}}).status_code == 409
    assert update(run, token, {"kind": "summary", "summary": {"x": 1}}).status_code == 200


def test_finish_with_a_non_zero_exit_code_ends_the_run_failed(sdk_run):
    run, token = sdk_run
    push(Client(), run.pk, token, {"points": [{"step": 1, "key": "loss", "value": 1.0, "time": T0}]})
    answer = post(f"/api/v1/sdk/runs/{run.pk}/finish", {"exit_code": 1}, token)
    assert answer.status_code == 200 and answer.json()["state"] == "failed"
