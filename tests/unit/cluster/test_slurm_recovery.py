"""Requeue after the cluster's faults, the stalled flag, profiles and the health view."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from orchestrator.cluster.backends.base import JobState, JobStatus
from orchestrator.cluster.models import ClusterProfile, Job
from orchestrator.cluster.recovery import flag_stalled, maybe_requeue
from orchestrator.cluster.services import sync_one_run
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def running_run(alice, tiny_config) -> Run:
    run = experiment_create(owner=alice, name="recovery", config=tiny_config).runs.get()
    Run.objects.filter(pk=run.pk).update(
        state=Run.State.RUNNING, attempt=1, backend="slurm", job_id="77", started_at=timezone.now()
    )
    Job.objects.create(run=run, attempt=1, backend="slurm", name=f"opl-{run.pk}-a1", job_id="77")
    run.refresh_from_db()
    return run


def node_fail(**kw) -> JobStatus:
    return JobStatus(
        job_id="77",
        state=kw.pop("state", JobState.INFRA_FAILED),
        native_state=kw.pop("native", "NODE_FAIL"),
        reason=kw.pop("reason", "Its node failed"),
        **kw,
    )


def test_node_failure_requeues_with_attempts_left(running_run):
    assert sync_one_run(running_run, node_fail())
    running_run.refresh_from_db()
    assert running_run.state == "queued"
    assert running_run.state_reason == (
        "Its node failed; requeued as attempt 2 of 3, resuming from the last checkpoint"
    )
    job = Job.objects.get(run=running_run, attempt=1)
    assert (job.native_state, job.final) == ("NODE_FAIL", True)  # the attempt's end is kept


def test_no_requeue_past_max_attempts_or_after_a_cancel(running_run):
    Run.objects.filter(pk=running_run.pk).update(attempt=3)
    Job.objects.filter(run=running_run).update(attempt=3)
    running_run.refresh_from_db()
    sync_one_run(running_run, node_fail())
    running_run.refresh_from_db()
    assert running_run.state == "failed" and running_run.state_reason == "Its node failed"


def test_cancel_requested_run_is_not_requeued(running_run):
    Run.objects.filter(pk=running_run.pk).update(cancel_requested=True)
    running_run.refresh_from_db()
    assert not maybe_requeue(running_run, node_fail())


def test_timeout_requeues_only_when_the_profile_says_so(running_run):
    timeout = node_fail(state=JobState.TIMEOUT, native="TIMEOUT", reason="Reached its time limit")
    assert not maybe_requeue(running_run, timeout)
    ClusterProfile.objects.create(name="long", is_default=True, requeue_on_timeout=True)
    assert maybe_requeue(running_run, timeout)
    assert running_run.state == "queued"


def test_plain_failure_is_not_requeued(running_run):
    assert not maybe_requeue(running_run, node_fail(state=JobState.FAILED, native="FAILED", exit_code=1))


def test_trainer_stopped_for_requeue_is_requeued(running_run):
    """A preemption with a grace time: Slurm signals, the trainer checkpoints and exits 75, and the
    job ends FAILED with that code, not PREEMPTED."""
    graceful = node_fail(state=JobState.FAILED, native="FAILED", exit_code=75, reason="exited with code 75")
    assert maybe_requeue(running_run, graceful)
    assert running_run.state == "queued"
    assert running_run.state_reason.endswith("requeued as attempt 2 of 3, resuming from the last checkpoint")


def test_stalled_heartbeat_is_flagged_and_cleared(running_run):
    now = timezone.now()
    Run.objects.filter(pk=running_run.pk).update(last_heartbeat=now - timedelta(minutes=20))
    assert flag_stalled(now) == 1
    running_run.refresh_from_db()
    assert running_run.state_reason == "Stalled? No heartbeat for 20 min while the job is running"
    assert Job.objects.get(run=running_run).stalled_since == now
    Run.objects.filter(pk=running_run.pk).update(last_heartbeat=now)
    assert flag_stalled(now) == 1
    running_run.refresh_from_db()
    assert running_run.state_reason == "" and Job.objects.get(run=running_run).stalled_since is None


@pytest.mark.parametrize("field", ["partition", "account", "qos", "gpu_type", "container"])
def test_profile_with_shell_metacharacters_is_refused_naming_the_field(field):
    profile = ClusterProfile(name="bad", **{field: "x; rm -rf /"})
    with pytest.raises(ValidationError) as err:
        profile.full_clean()
    assert field in err.value.message_dict


def test_health_view_shows_an_unreachable_slurmrestd_with_its_url(settings, client, alice):
    settings.CLUSTER_BACKEND = "slurm"
    settings.SLURM_REST_URL = "http://127.0.0.1:9"  # discard port: nothing listens
    settings.SLURM_REST_USER = "slurmtest"
    settings.SLURM_JWT = "x.y.z"
    settings.SLURM_JWT_KEY_FILE = ""
    client.force_login(alice)
    page = client.get("/cluster/health").content.decode()
    assert "unreachable" in page and "http://127.0.0.1:9" in page


def test_lost_only_after_the_grace_since_the_cluster_last_reported_the_job(running_run, settings):
    settings.LOST_GRACE_SECONDS = 120
    now = timezone.now()
    Run.objects.filter(pk=running_run.pk).update(started_at=now - timedelta(hours=3))
    Job.objects.filter(run=running_run).update(last_seen_at=now - timedelta(seconds=30))
    running_run.refresh_from_db()
    assert not sync_one_run(running_run, None)  # vanished just now: not lost yet
    Job.objects.filter(run=running_run).update(last_seen_at=now - timedelta(minutes=5))
    assert sync_one_run(running_run, None)
    running_run.refresh_from_db()
    assert running_run.state == "lost"
