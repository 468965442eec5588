"""Runs logged from outside, the server's side: opened by the `opl` SDK with a logging
or personal token, found again by their client id, ended by finish(exit_code) or by heartbeats
that stop, and a logging token that writes to its own runs only."""

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from orchestrator.experiments.external_runs import external_runs_expire, logging_token_create
from orchestrator.experiments.models import Run
from orchestrator.experiments.queue import runs_to_dispatch
from orchestrator.experiments.services import experiment_create
from tests.unit.metrics.helpers import points

pytestmark = pytest.mark.django_db
CONFIG = {"actor_rollout_ref": {"actor": {"clip_ratio": 0.2}}, "trainer": {"seed": 3}, "staleness": 4}


def post(client: Client, path: str, body: dict, token: str | None = None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.post(path, json.dumps(body), content_type="application/json", **headers)


def open_run(token: str, client_id: str = "client-0001", **fields):
    body = {"client_id": client_id, "name": "verl-7b", "project": "lab", "config": CONFIG, **fields}
    return post(Client(), "/api/v1/sdk/runs", body, token)


def test_a_logging_token_opens_a_running_run_with_its_config_and_finds_it_again(alice):
    _, token = logging_token_create(user=alice)
    first = open_run(token, tags=["verl"], notes="from the SDK")
    assert first.status_code == 201, first.content
    answer = first.json()
    run = Run.objects.get(pk=answer["id"])
    assert (run.owner, run.experiment.project.name, run.config, run.state) == (alice, "lab", CONFIG, "running")
    assert [t.name for t in run.tags.all()] == ["verl"] and run.notes == "from the SDK"
    assert answer["token"].startswith("oplrun_") and answer["url"].endswith(f"/runs/{run.pk}/")
    again = open_run(token)
    assert again.status_code == 200 and again.json()["id"] == run.pk and again.json()["token"] == answer["token"]
    assert Run.objects.count() == 1


def test_a_personal_token_opens_runs_too_but_a_read_only_one_does_not(alice):
    from orchestrator.accounts.services import api_token_create

    assert open_run(api_token_create(user=alice, name="w")).status_code == 201
    read_only = open_run(api_token_create(user=alice, name="r", scope="read"), client_id="client-0002")
    assert read_only.status_code == 403 and "read-only" in read_only.json()["error"]
    assert open_run("opllog_not-a-token", client_id="client-0003").status_code == 401
    assert open_run("", client_id="client-0004").status_code == 401


def test_another_logging_token_of_the_same_user_does_not_reopen_the_run(alice):
    _, first = logging_token_create(user=alice)
    assert open_run(first).status_code == 201
    _, second = logging_token_create(user=alice, name="second")
    answer = open_run(second)
    assert answer.status_code == 403 and answer.json()["errors"][0]["field"] == "client_id"


def test_the_logging_token_writes_only_its_own_runs(alice, tiny_config):
    _, token = logging_token_create(user=alice)
    mine = open_run(token).json()
    bundled = experiment_create(owner=alice, name="bundled", config=tiny_config).runs.get()
    batch = {"attempt": 1, "points": points("train/loss", [1, 2])}
    # the logging token itself writes to no run, not even alice's own bundled one (as if none existed)
    assert post(Client(), f"/api/v1/runs/{bundled.pk}/metrics", batch, token).status_code == 404
    assert post(Client(), f"/api/v1/runs/{mine['id']}/metrics", batch, token).status_code == 404
    # nor reads or changes anything through the API
    assert Client().get("/api/v1/runs", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 401
    assert post(Client(), f"/api/v1/runs/{bundled.pk}/cancel", {}, token).status_code == 401
    # what it opened, it writes through that run's own token
    assert post(Client(), f"/api/v1/runs/{mine['id']}/metrics", batch, mine["token"]).status_code == 202
    assert post(Client(), f"/api/v1/runs/{bundled.pk}/metrics", batch, mine["token"]).status_code == 404


def test_finish_sets_the_final_state_from_the_exit_code(alice, tiny_config):
    _, token = logging_token_create(user=alice)
    ok, bad = open_run(token).json(), open_run(token, client_id="client-0002").json()
    answer = post(Client(), f"/api/v1/sdk/runs/{ok['id']}/finish", {"exit_code": 0}, ok["token"])
    assert answer.status_code == 200 and answer.json()["state"] == "succeeded"
    post(Client(), f"/api/v1/sdk/runs/{bad['id']}/finish", {"exit_code": 3}, bad["token"])
    failed = Run.objects.get(pk=bad["id"])
    assert (failed.state, failed.exit_code) == ("failed", 3) and "code 3" in failed.state_reason
    assert post(Client(), f"/api/v1/sdk/runs/{ok['id']}/finish", {"exit_code": 0}, bad["token"]).status_code == 404
    wrong = post(Client(), f"/api/v1/sdk/runs/{ok['id']}/finish", {"exit_code": "x"}, ok["token"])
    assert wrong.status_code == 400 and wrong.json()["errors"][0]["field"] == "exit_code"
    from tests.unit.metrics.helpers import make_run

    bundled, bundled_token = make_run(alice, tiny_config)
    assert post(Client(), f"/api/v1/sdk/runs/{bundled.pk}/finish", {}, bundled_token).status_code == 409


def test_a_run_whose_heartbeats_stop_fails(alice):
    _, token = logging_token_create(user=alice)
    quiet = open_run(token, heartbeat_timeout_s=60).json()
    alive = open_run(token, client_id="client-0002", heartbeat_timeout_s=60).json()
    Run.objects.filter(pk=quiet["id"]).update(last_heartbeat=timezone.now() - timedelta(seconds=61))
    beat = post(Client(), f"/api/v1/runs/{alive['id']}/heartbeat", {"step": 5}, alive["token"])
    assert beat.status_code == 200
    assert external_runs_expire() == 1
    assert Run.objects.get(pk=quiet["id"]).state == "failed"
    assert "no heartbeat" in Run.objects.get(pk=quiet["id"]).state_reason
    assert Run.objects.get(pk=alive["id"]).state == "running"


def test_bad_fields_are_named(alice):
    _, token = logging_token_create(user=alice)
    for fields, field in (
        ({"client_id": "short"}, "client_id"),
        ({"client_id": "bad id with spaces"}, "client_id"),
        ({"name": "a/b"}, "name"),
        ({"config": [1, 2]}, "config"),
        ({"tags": ["x" * 500]}, "tags.0"),
        ({"heartbeat_timeout_s": 1}, "heartbeat_timeout_s"),
        ({"surprise": 1}, "surprise"),
    ):
        answer = open_run(token, **fields)
        assert answer.status_code == 400, fields
        assert answer.json()["errors"][0]["field"] == field
    hostile = open_run(token, config={"note": "a\x00b"})
    assert hostile.status_code == 400 and "NUL" in hostile.json()["error"] and Run.objects.count() == 0


def test_runs_logged_from_outside_take_no_place_in_the_queue(alice, tiny_config, settings):
    settings.MAX_ACTIVE_RUNS = 1
    _, token = logging_token_create(user=alice)
    open_run(token)
    queued = experiment_create(owner=alice, name="bundled", config=tiny_config).runs.get()
    assert runs_to_dispatch() == [queued.pk]


def test_a_logging_token_is_made_by_its_user_and_shown_once(alice, api_client):
    answer = api_client(alice).post(
        "/api/v1/sdk/tokens", json.dumps({"name": "cluster"}), content_type="application/json"
    )
    assert answer.status_code == 201 and answer.json()["token"].startswith("opllog_")
    assert open_run(answer.json()["token"]).status_code == 201
    assert post(Client(), "/api/v1/sdk/tokens", {}, answer.json()["token"]).status_code == 401  # no tokens from tokens


def test_a_logged_run_is_cancelled_at_once_and_never_queued_again(alice, api_client):
    _, token = logging_token_create(user=alice)
    opened = open_run(token).json()
    lab = api_client(alice)
    answer = lab.post(f"/api/v1/runs/{opened['id']}/cancel")
    assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
    assert lab.post(f"/api/v1/runs/{opened['id']}/retry").status_code == 409
    assert Run.objects.get(pk=opened["id"]).state == "cancelled"
    # the process goes on logging, but cancelling is how a logged run is stopped: its token no
    # longer writes (no job of ours to stop), and it says why to the process that holds it
    batch = {"attempt": 1, "points": points("train/loss", [1])}
    refused = post(Client(), f"/api/v1/runs/{opened['id']}/metrics", batch, opened["token"])
    assert refused.status_code == 403 and "was cancelled" in refused.json()["error"]
    finish = post(Client(), f"/api/v1/sdk/runs/{opened['id']}/finish", {"exit_code": 0}, opened["token"])
    assert finish.status_code == 403 and Run.objects.get(pk=opened["id"]).state == "cancelled"


def test_other_methods_are_a_json_405(alice, api_client):
    for path in ("/api/v1/sdk/runs", "/api/v1/sdk/runs/1/finish"):
        answer = api_client(alice).get(path)
        assert answer.status_code == 405 and answer["Allow"] == "POST" and "POST" in answer.json()["error"], path
    answer = api_client(alice).put("/api/v1/sdk/tokens")
    assert answer.status_code == 405 and answer["Allow"] == "GET, POST"


def test_the_pages_show_a_logged_run_with_a_config_of_its_own(alice, tiny_config):
    _, token = logging_token_create(user=alice)
    opened = open_run(token, group="verl-sweep").json()
    batch = {"attempt": 1, "points": points("train/reward_mean", range(5))}
    assert post(Client(), f"/api/v1/runs/{opened['id']}/metrics", batch, opened["token"]).status_code == 202
    bundled = experiment_create(owner=alice, name="bundled", config=tiny_config, project="lab").runs.get()
    run = Run.objects.get(pk=opened["id"])
    browser = Client()
    browser.force_login(alice)
    for path in (
        "/",
        f"/runs/{run.pk}/",
        f"/runs/{run.pk}/config.yaml",
        "/experiments/",
        f"/experiments/{run.experiment_id}/",
        f"/experiments/{run.experiment_id}/statistics?role.staleness=staleness",
        f"/compare/?runs={run.pk},{bundled.pk}",
        "/api/v1/runs?q=state = running",
        f"/api/v1/runs/{run.pk}",
    ):
        assert browser.get(path).status_code == 200, path
    assert b"clip_ratio" in browser.get(f"/runs/{run.pk}/config.yaml").content
