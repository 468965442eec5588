"""Every Slurm job state maps onto a run state, with the detail kept in plain words."""

from __future__ import annotations

import pytest

from orchestrator.cluster.backends.base import JobState
from orchestrator.cluster.backends.slurm import to_status
from orchestrator.cluster.slurm.schemas import JobInfo
from orchestrator.cluster.slurm.states import CLUSTER_FAULT_STATES, STATE_MAP, reason_in_words
from orchestrator.cluster.slurm.wire import wire_for

EXPECTED = {
    "PENDING": JobState.PENDING,
    "RUNNING": JobState.RUNNING,
    "SUSPENDED": JobState.RUNNING,
    "COMPLETED": JobState.SUCCEEDED,
    "FAILED": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT,
    "DEADLINE": JobState.FAILED,
    "NODE_FAIL": JobState.INFRA_FAILED,
    "PREEMPTED": JobState.INFRA_FAILED,
    "BOOT_FAIL": JobState.INFRA_FAILED,
}


def test_every_base_state_is_mapped():
    assert set(STATE_MAP) == set(EXPECTED)
    assert {s for s, st in EXPECTED.items() if st is JobState.INFRA_FAILED} == CLUSTER_FAULT_STATES


@pytest.mark.parametrize("api", ["v0.0.38", "v0.0.42"])
@pytest.mark.parametrize("state", sorted(EXPECTED))
def test_state_mapping_on_both_wire_formats(api, state):
    wire = wire_for(api)
    raw = {
        "job_id": 7,
        "job_state": state if api == "v0.0.38" else [state],
        "state_reason": "None",
        "start_time": 1795966872 if state != "PENDING" else 0,
        "end_time": 1795966900,
        "nodes": "n1",
    }
    status = to_status(wire.parse_job(raw))
    assert status.state is EXPECTED[state]
    assert status.native_state == state
    assert status.reason and status.reason[0].isupper()
    assert (status.ended_at is not None) == EXPECTED[state].is_terminal


def test_pending_reason_in_plain_words():
    job = JobInfo(job_id="1", state="PENDING", reason="Resources")
    assert to_status(job).reason == "Waiting for resources (CPUs, memory or GPUs) to become free"
    assert reason_in_words("QOSMaxJobsPerUserLimit") == "the per-user job limit of the QOS has been reached"
    assert reason_in_words("AssocGrpNodeLimit") == "Association group node limit"  # spelled out


def test_exit_codes_and_signals():
    oom = to_status(JobInfo(job_id="1", state="OUT_OF_MEMORY", exit_code=0, signal=9))
    assert oom.state is JobState.FAILED and oom.exit_code == 0
    killed = to_status(JobInfo(job_id="1", state="FAILED", signal=9))
    assert killed.exit_code == 137 and "SIGKILL" in killed.reason
    # v0.0.38 wait status: 768 is exit code 3, 9 is SIGKILL
    assert wire_for("v0.0.38").exit_status(768) == (3, None)
    assert wire_for("v0.0.38").exit_status(9) == (None, 9)


@pytest.mark.parametrize("raw", [["COMPLETED", "COMPLETING"], "COMPLETING", ["FAILED", "COMPLETING"]])
def test_completing_is_not_final_yet(raw):
    wire = wire_for("v0.0.42" if isinstance(raw, list) else "v0.0.38")
    status = to_status(wire.parse_job({"job_id": 1, "job_state": raw, "exit_code": 0}))
    assert status.state is JobState.RUNNING and status.exit_code is None


def test_slurm_requeued_job_is_pending_with_the_flag_kept():
    status = to_status(
        wire_for("v0.0.42").parse_job({"job_id": 1, "job_state": ["PENDING", "REQUEUED"], "state_reason": "BeginTime"})
    )
    assert status.state is JobState.PENDING and status.native_state == "PENDING+REQUEUED"
