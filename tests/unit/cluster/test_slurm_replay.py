"""Every recorded exchange of both slurmrestd families, replayed through the client."""

from __future__ import annotations

import pytest

from orchestrator.cluster.backends.base import JobState
from orchestrator.cluster.backends.slurm import SlurmBackend, to_status
from orchestrator.cluster.slurm.errors import SlurmAuthError, SlurmError, SlurmJobNotFound
from orchestrator.cluster.slurm.schemas import JobRequest
from tests.unit.cluster.slurm_replay import FAMILIES, replay_client, sample, sample_names

families = pytest.mark.parametrize("family", list(FAMILIES))


def use(family: str, *names: str, **kw):
    return replay_client(family, *names, **kw)


def dummy_request() -> JobRequest:
    return JobRequest(
        name="x",
        script="#!/bin/sh\n",
        environment={"PATH": "/bin"},
        working_directory="/tmp",
        standard_output="/tmp/o",
        standard_error="/tmp/e",
    )


@families
def test_ping_diag_nodes_partitions(family):
    client, _ = use(family, "01-ping", "02-diag", "03-nodes", "04-partitions")
    pings = client.ping()
    assert [p.up for p in pings] == [True]
    assert client.slurm_release in ("22.05.8", "24.11.5")
    assert client.diag()  # statistics present
    [node] = client.nodes()
    assert (node.name, node.cpus, node.gpus, node.gpus_used, node.memory_mb) == ("localhost", 16, 4, 0, 16000)
    assert node.state == "IDLE"
    [part] = client.partitions()
    assert (part.name, part.state, part.total_cpus, part.nodes) == ("debug", "UP", 16, "localhost")


@families
def test_training_job_lifecycle(family):
    client, replay = use(
        family,
        "05-job-submit",
        "06-job-get-running",
        "07-jobs-list",
        "08-job-signal-USR1",
        "08b-job-cancel",
        "09-job-get-cancelled",
    )
    assert client.submit(dummy_request()).job_id == "1"
    running = client.job("1")
    assert (running.state, running.nodes, running.gres_detail) == ("RUNNING", "localhost", ["gpu:a100:1(IDX:0)"])
    status = to_status(running)
    assert status.state is JobState.RUNNING and status.ended_at is None and status.started_at is not None
    assert [j.job_id for j in client.jobs() if j.state == "RUNNING"] == ["1"]
    client.signal("1", "SIGUSR1")
    assert replay.requests[-1].url.params["signal"] == "SIGUSR1"
    client.cancel("1")
    cancelled = to_status(client.job("1"))
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.exit_code == 128 + 15  # ended by SIGTERM
    assert "SIGTERM" in cancelled.reason
    assert cancelled.ended_at is not None


@families
def test_completed_and_failed_jobs(family):
    client, _ = use(family, "10-job-submit-quick", "11-job-get-completed", "12-job-submit-failing", "13-job-get-failed")
    assert client.submit(dummy_request()).job_id == "2"
    done = to_status(client.job("2"))
    assert (done.state, done.exit_code) == (JobState.SUCCEEDED, 0)
    assert client.submit(dummy_request()).job_id == "3"
    failed = to_status(client.job("3"))
    assert (failed.state, failed.exit_code, failed.native_state) == (JobState.FAILED, 3, "FAILED")
    assert failed.reason == "Exited with code 3"


@families
def test_held_job_update_and_cancel(family):
    client, replay = use(
        family,
        "14-job-submit-held",
        "15-job-get-held",
        "16-job-update",
        "17-job-get-updated",
        "18-error-signal-pending-job",
        "19-job-cancel-held",
    )
    held = client.submit(dummy_request())
    assert held.job_id == "4"  # a 200 with job_id is a success even with "errors" (2042) in it
    assert any("held state" in w for w in held.warnings)
    status = to_status(client.job("4"))
    assert status.state is JobState.PENDING
    assert status.reason == "Held by the user; release it to let it start"
    client.update("4", comment="updated by REST", time_limit_min=3)
    sent = replay.requests[-1]
    assert sent.method == "POST" and b"updated by REST" in sent.content
    updated = client.job("4")
    assert (updated.comment, updated.time_limit_min) == ("updated by REST", 3)
    with pytest.raises(SlurmError) as err:  # 22.05: HTTP 500; 24.11: HTTP 200 with status[].error
        client.signal("4", "SIGUSR1")
    assert err.value.code == 2020 and "can not be altered now" in str(err.value)
    assert not err.value.permanent
    client.cancel("4")


@families
def test_unsatisfiable_request_is_refused_permanently_with_slurms_reason(family):
    client, _ = use(family, "20-error-submit-unsatisfiable")
    with pytest.raises(SlurmError) as err:
        client.submit(dummy_request())
    assert err.value.permanent and err.value.code == 2014
    assert "Requested node configuration is not available" in str(err.value)


@families
def test_unknown_job(family):
    client, _ = use(family, "21-error-job-unknown", "22-error-cancel-unknown")
    with pytest.raises(SlurmJobNotFound):
        client.job("999999")
    with pytest.raises(SlurmJobNotFound):
        client.cancel("999999")


@families
def test_cancelling_a_job_slurm_no_longer_knows_is_not_an_error_for_the_backend(family):
    client, _ = use(family, "22-error-cancel-unknown")
    SlurmBackend(client=client).cancel("999999")


@families
@pytest.mark.parametrize("name", ["23-error-no-token", "24-error-bad-token", "25-error-user-token-mismatch"])
def test_auth_failures_say_so(family, name):
    client, _ = use(family, name)
    with pytest.raises(SlurmAuthError) as err:
        client.jobs() if name != "23-error-no-token" else client.ping()
    assert str(err.value).startswith("Slurm authentication failed")
    assert "t.t.t" not in str(err.value)  # the token never shows
    assert not err.value.permanent  # a new token fixes it: the run stays queued


@families
def test_auth_failure_names_an_expired_token(family):
    from orchestrator.cluster.slurm.auth import mint_token

    expired = mint_token(b"k" * 32, "slurmtest", lifespan_s=60, now=1_000_000)
    client, _ = use(family, "24-error-bad-token", token=expired)
    with pytest.raises(SlurmAuthError, match="token expired at 1970-01-12"):
        client.jobs()


@families
def test_submit_without_environment_is_an_error(family):
    client, _ = use(family, "26-error-no-environment")
    with pytest.raises(SlurmError) as err:
        client.submit(dummy_request())
    assert err.value.code in (2127, 2019)


@families
def test_unknown_version_404_is_an_error_naming_the_status(family):
    client, _ = use(family, "27-error-unknown-version", any_path=True)
    with pytest.raises(SlurmError, match="HTTP 404"):
        client.ping()


@families
def test_accounting_records(family):
    client, _ = use(family, "30-slurmdb-jobs", "31-slurmdb-job-failed", "32-slurmdb-diag")
    jobs = {j.job_id: j for j in client.accounting_jobs()}
    assert (jobs["1"].state, jobs["2"].state, jobs["3"].state) == ("CANCELLED", "COMPLETED", "FAILED")
    failed = client.accounting_job("3")
    assert failed.state == "FAILED" and failed.end_time is not None
    # 22.05's slurmdbd reports 0 for a job that exited 3: we keep no code rather than a wrong one
    assert failed.exit_code == (3 if family.startswith("v0.0.42") else None)
    with pytest.raises(SlurmError) as err:
        client.accounting_diag()
    assert err.value.code == 2002 and "permission denied" in str(err.value)


@families
def test_newest_offered_version_is_discovered_from_openapi(family):
    client, replay = replay_client(family, "01-ping", api_version="auto")
    client.ping()
    assert client.wire.api_version == FAMILIES[family]
    assert replay.requests[0].url.path == "/openapi/v3"


def test_every_recorded_sample_is_replayed():
    """Each recorded exchange (both families run every test above) is named by a test here."""
    import re
    from pathlib import Path

    named = set(re.findall(r'"(\d\d[a-z]?-[A-Za-z0-9-]+)"', Path(__file__).read_text()))
    missing = [(f, n) for f in FAMILIES for n in sample_names(f) if n not in named]
    assert not missing, f"samples not replayed: {missing}"


@families
def test_submit_body_matches_the_recorded_wire_format(family):
    """Our request for the recorded training job has the recorded shape, field by field."""
    recorded = sample(family, "05-job-submit")["request"]["body"]
    ours = replay_client(family)[0].wire.submit_body(
        JobRequest(
            name="train-resnet50",
            partition="debug",
            working_directory="/tmp",
            environment={"PATH": "/usr/local/bin:/usr/bin:/bin", "MODEL": "resnet50", "EPOCHS": "30"},
            standard_output="/tmp/train-%j.out",
            standard_error="/tmp/train-%j.err",
            gpus=1,
            cpus_per_task=2,
            memory_mb=1024,
            time_limit_min=10,
            comment="dashboard-run-42",
            script=(recorded.get("script") or recorded["job"]["script"]),
        )
    )

    def normal(body):
        job = {k: v for k, v in body["job"].items() if k != "requeue"}
        for k, v in job.items():
            if isinstance(v, dict):
                job[k] = {kk: vv for kk, vv in v.items() if kk != "infinite"}
        return {**body, "job": job}

    assert normal(ours) == normal(recorded)
    assert ours["job"]["requeue"] is False  # we requeue as a new attempt ourselves


@families
def test_final_state_of_a_forgotten_job_comes_from_accounting(family):
    """Job 3 is no longer in /jobs (MinJobAge passed): with accounting on, slurmdbd has it."""
    client, _ = use(family, "07-jobs-list", "31-slurmdb-job-failed")
    statuses = SlurmBackend(client=client, accounting=True).statuses(["1", "3"])
    assert statuses["1"].state is JobState.RUNNING
    assert statuses["3"].state is JobState.FAILED and statuses["3"].ended_at is not None


@families
def test_without_accounting_a_forgotten_job_is_simply_absent(family):
    client, _ = use(family, "07-jobs-list")
    assert set(SlurmBackend(client=client, accounting=False).statuses(["1", "3"])) == {"1"}
