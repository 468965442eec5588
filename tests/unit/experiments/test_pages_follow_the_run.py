"""Pages that follow the run: the run page's job-card poll brings the header badge and
the facts card (attempt, reason, actions) with it when they changed; a run that ended cancelled
does not keep "cancelling: …" as its reason; an experiment ends with its last run (and a retry
reopens it), and its page then offers no Pause or Cancel."""

import json

import pytest

from orchestrator.cluster.backends.base import JobState, JobStatus
from orchestrator.cluster.models import Job
from orchestrator.cluster.services import sync_one_run
from orchestrator.experiments.models import Experiment, Run
from orchestrator.experiments.services import experiment_create, run_request_cancel, run_retry, run_transition

pytestmark = pytest.mark.django_db
S = Run.State


def finish(run, state=S.SUCCEEDED):
    for to in (S.SUBMITTED, S.RUNNING, state):
        assert run_transition(run=run, to=to)


def test_the_job_poll_brings_the_header_and_facts_when_the_status_changed(alice, tiny_config, client):
    run = experiment_create(owner=alice, name="e", config=tiny_config).runs.get()
    finish(run, S.FAILED)
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    seen = page.split('id="run-status-version" value="')[1].split('"')[0]
    poll = client.get(f"/runs/{run.pk}/job", {"seen": seen}).content.decode()
    assert 'id="run-facts"' not in poll  # nothing changed: the job card alone
    client.post(f"/runs/{run.pk}/retry")
    run.refresh_from_db()
    assert run_transition(run=run, to=S.SUBMITTED, attempt=2)  # the worker starts attempt 2
    assert run_transition(run=run, to=S.RUNNING)
    poll = client.get(f"/runs/{run.pk}/job", {"seen": seen}).content.decode()
    facts = poll[poll.index('<div id="run-facts" hx-swap-oob="true">') :]
    assert "attempt 2 of 3" in facts and "Cancel run" in facts and "Retry" not in facts
    assert '<span class="state state-running" id="run-state" hx-swap-oob="true">running</span>' in poll
    assert "<dt>Attempt</dt><dd>2 of 3</dd>" in poll  # the job card says the same


def test_a_run_that_ended_cancelled_does_not_keep_the_cancelling_reason(alice, tiny_config):
    run = experiment_create(owner=alice, name="e", config=tiny_config).runs.get()
    run_transition(run=run, to=S.SUBMITTED, attempt=1, job_id="7", backend="local")
    run_transition(run=run, to=S.RUNNING)
    Job.objects.create(run=run, attempt=1, backend="local", name=f"opl-{run.pk}-a1", job_id="7")
    run_request_cancel(run=run)
    assert run.state_reason.startswith("cancelling")
    ended = JobStatus(job_id="7", state=JobState.CANCELLED, native_state="CANCELLED", reason="stopped by its owner")
    sync_one_run(run, ended)
    run.refresh_from_db()
    assert run.state == S.CANCELLED and run.state_reason == "stopped by its owner"


def test_an_experiment_ends_with_its_last_run_and_a_retry_reopens_it(alice, tiny_config, api_client):
    experiment = experiment_create(owner=alice, name="e", config=tiny_config, seeds=2)
    first, second = experiment.runs.order_by("id")
    finish(first)
    assert Experiment.objects.get(pk=experiment.pk).state == "active"
    finish(second, S.FAILED)
    assert Experiment.objects.get(pk=experiment.pk).state == "ended"
    client = api_client(alice)
    assert client.get(f"/api/v1/experiments/{experiment.pk}").json()["state"] == "ended"
    for action in ("pause", "cancel"):
        assert client.post(f"/api/v1/experiments/{experiment.pk}/{action}").status_code == 409
    second.refresh_from_db()
    assert run_retry(run=second)
    assert Experiment.objects.get(pk=experiment.pk).state == "active"


def test_a_paused_experiment_ends_too_and_a_cancelled_one_stays_cancelled(alice, tiny_config):
    from orchestrator.experiments.services import experiment_cancel, experiment_pause

    paused = experiment_create(owner=alice, name="p", config=tiny_config)
    run = paused.runs.get()
    run_transition(run=run, to=S.SUBMITTED)
    experiment_pause(experiment=paused)
    run_transition(run=run, to=S.SUCCEEDED)
    assert Experiment.objects.get(pk=paused.pk).state == "ended"
    cancelled = experiment_create(owner=alice, name="c", config=tiny_config)
    experiment_cancel(experiment=cancelled)
    assert Experiment.objects.get(pk=cancelled.pk).state == "cancelled"


def test_the_experiment_page_polls_its_facts_and_an_ended_one_offers_no_pause_or_cancel(alice, tiny_config, client):
    experiment = experiment_create(owner=alice, name="e", config=tiny_config)
    client.force_login(alice)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert 'id="pause-sweep"' in page and 'id="cancel-sweep"' in page
    seen = json.loads(page.split("hx-vals='")[1].split("'")[0])["seen"]
    headers = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "experiment-facts"}
    assert client.get(f"/experiments/{experiment.pk}/", {"seen": seen}, **headers).status_code == 204
    finish(experiment.runs.get())
    poll = client.get(f"/experiments/{experiment.pk}/", {"seen": seen}, **headers).content.decode()
    assert 'id="experiment-state" hx-swap-oob="true"' in poll and ">ended</span>" in poll
    assert 'id="pause-sweep"' not in poll and 'id="cancel-sweep"' not in poll
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert ">ended</span>" in page and 'id="cancel-sweep"' not in page
