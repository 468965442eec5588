"""One submitter per attempt: a claim (queued -> submitted) is a lease that other submit calls
leave alone until it is stale, and a stale claim is taken over by one of them. The dispatcher
enqueues a queued run again every few seconds while its submit task waits to retry, so after
a slurmrestd outage several submit tasks of one run run at once (benchmarks/faults.py
restd-outage; tests/faults/test_submit_race.py does this on the live cluster). Real local
backend; the Slurm client's error flags against an httpx transport that fails like a network."""

import time
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from orchestrator.cluster.backends.base import job_name
from orchestrator.cluster.backends.local import LocalBackend
from orchestrator.cluster.services import run_cancel, run_submit, submit_stale_after, sync_active_runs
from orchestrator.cluster.slurm.auth import SlurmCredentials
from orchestrator.cluster.slurm.client import SlurmClient
from orchestrator.cluster.slurm.errors import SlurmUnreachable
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create, run_transition
from orchestrator.experiments.tokens import new_salt

pytestmark = pytest.mark.django_db
S = Run.State


@pytest.fixture
def local(settings, tmp_path):
    settings.LOCAL_JOBS_DIR = tmp_path / "jobs"
    settings.RUNS_DIR = tmp_path / "runs"
    settings.CANCEL_GRACE_SECONDS = 5
    settings.SUBMIT_STALE_SECONDS = 60
    return LocalBackend()


def claimed(alice, config, *, ago_s: float) -> Run:
    """A run another submit call claimed `ago_s` seconds ago, with no job recorded yet."""
    run = experiment_create(owner=alice, name="claim", config=config).runs.get()
    assert run_transition(run=run, to=S.SUBMITTED, attempt=1, token_salt=new_salt(), backend="local")
    Run.objects.filter(pk=run.pk).update(submitted_at=timezone.now() - timedelta(seconds=ago_s))
    run.refresh_from_db()
    return run


def stop(run: Run) -> None:
    run_cancel(run_id=run.pk)
    deadline = time.monotonic() + 60
    while Run.objects.get(pk=run.pk).is_active:
        assert time.monotonic() < deadline, "the job did not stop"
        sync_active_runs()
        time.sleep(0.2)


def test_a_fresh_claim_is_left_to_its_submitter(alice, tiny_config, local):
    run = claimed(alice, tiny_config, ago_s=2)
    assert run_submit(run_id=run.pk) is None  # e.g. a second task the dispatcher enqueued
    after = Run.objects.get(pk=run.pk)
    assert (after.state, after.job_id, after.attempt, after.token_salt, after.submitted_at) == (
        S.SUBMITTED,
        "",
        1,
        run.token_salt,
        run.submitted_at,
    )
    assert not any(local.jobs_dir.iterdir())  # nothing submitted


def test_a_stale_claim_is_taken_over_with_the_same_attempt_and_salt(alice, tiny_config, local):
    run = claimed(alice, tiny_config, ago_s=61)
    taken = run_submit(run_id=run.pk)
    assert taken is not None
    after = Run.objects.get(pk=run.pk)
    assert (after.attempt, after.token_salt, after.job_id) == (1, run.token_salt, job_name(run.pk, 1))
    assert timezone.now() - after.submitted_at < timedelta(seconds=5)  # the lease was renewed
    assert run_submit(run_id=run.pk) is None  # recorded: nobody submits it again
    assert [p.name for p in local.jobs_dir.iterdir()] == [job_name(run.pk, 1)]
    stop(run)


def test_two_callers_that_read_the_same_stale_claim_take_it_over_once(alice, tiny_config, local):
    from orchestrator.cluster import services

    run = claimed(alice, tiny_config, ago_s=61)
    first, second = Run.objects.get(pk=run.pk), Run.objects.get(pk=run.pk)  # both read it stale
    assert services._take_over_stale_claim(first) is True
    assert services._take_over_stale_claim(second) is False
    assert services._renew_claim(first) is True  # the winner still holds it at its submit


def test_the_stale_period_is_never_shorter_than_a_slurm_submit_can_take(settings, local):
    settings.SUBMIT_STALE_SECONDS = 4  # as benchmarks/faults.py sets it, for quick repairs
    settings.SLURM_REST_URL = "http://127.0.0.1:9"  # nothing is contacted
    settings.SLURM_REST_USER = "opl"
    settings.SLURM_JWT = "t.t.t"
    settings.SLURM_REST_TIMEOUT = 10
    # version discovery, the look-up by name and the POST: 3 x (10 s + 3.5 s of connect back-off)
    assert submit_stale_after("slurm") >= timedelta(seconds=40.5)
    assert submit_stale_after("local") == timedelta(seconds=4)  # its submit is atomic (a lock file)


def test_a_sent_request_without_an_answer_is_uncertain_a_refused_connection_is_not():
    def times_out(request):
        raise httpx.ReadTimeout("no answer", request=request)

    client = SlurmClient(
        "http://h:1",
        SlurmCredentials("u", token="t"),
        api_version="v0.0.38",
        transport=httpx.MockTransport(times_out),
        connect_retries=0,
    )
    with pytest.raises(SlurmUnreachable) as posted:
        client.cancel("12")  # a DELETE, like the submit's POST, may have been carried out
    assert posted.value.uncertain and not posted.value.permanent
    with pytest.raises(SlurmUnreachable) as read:
        client.jobs()
    assert not read.value.uncertain  # a GET changes nothing

    def refuses(request):
        raise httpx.ConnectError("connection refused", request=request)

    client = SlurmClient(
        "http://h:1",
        SlurmCredentials("u", token="t"),
        api_version="v0.0.38",
        transport=httpx.MockTransport(refuses),
        connect_retries=0,
    )
    with pytest.raises(SlurmUnreachable) as refused:
        client.cancel("12")
    assert not refused.value.uncertain  # never sent
