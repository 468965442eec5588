"""Slurm's job states and pending reasons, mapped onto run states and plain words."""

from __future__ import annotations

import re
import signal as _signal

from orchestrator.cluster.backends.base import JobState

from .schemas import JobInfo

# Base state -> (our state, what it means). Every base state Slurm has (job_state_string).
STATE_MAP: dict[str, tuple[JobState, str]] = {
    "PENDING": (JobState.PENDING, "waiting in the Slurm queue"),
    "RUNNING": (JobState.RUNNING, "running"),
    "SUSPENDED": (JobState.RUNNING, "suspended by the cluster (it will resume)"),
    "COMPLETED": (JobState.SUCCEEDED, "finished successfully"),
    "CANCELLED": (JobState.CANCELLED, "cancelled"),
    "FAILED": (JobState.FAILED, "exited with an error"),
    "OUT_OF_MEMORY": (JobState.FAILED, "ran out of memory"),
    "TIMEOUT": (JobState.TIMEOUT, "reached its time limit"),
    "DEADLINE": (JobState.FAILED, "could not finish before its deadline"),
    "NODE_FAIL": (JobState.INFRA_FAILED, "its node failed"),
    "PREEMPTED": (JobState.INFRA_FAILED, "preempted by a higher-priority job"),
    "BOOT_FAIL": (JobState.INFRA_FAILED, "its node failed to boot"),
}

# States whose failure is the cluster's fault: the run may be requeued as a new attempt.
CLUSTER_FAULT_STATES = {"NODE_FAIL", "PREEMPTED", "BOOT_FAIL"}

# Flags that mean "not settled yet", whatever the base state says.
UNSETTLED_FLAGS = {
    "COMPLETING",
    "CONFIGURING",
    "STAGE_OUT",
    "SIGNALING",
    "REQUEUED",
    "RESIZING",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "SPECIAL_EXIT",
    "UPDATE_DB",
    "POWER_UP_NODE",
}

# Pending (and end) reasons in plain words; anything else is spelled out from its name.
REASONS: dict[str, str] = {
    "None": "",
    "Priority": "waiting for higher-priority jobs to start first",
    "Resources": "waiting for resources (CPUs, memory or GPUs) to become free",
    "Dependency": "waiting for another job it depends on",
    "DependencyNeverSatisfied": "a job it depends on failed, so it can never start",
    "BeginTime": "waiting for its scheduled start time",
    "JobHeldUser": "held by the user; release it to let it start",
    "JobHeldAdmin": "held by a cluster administrator",
    "PartitionDown": "the partition is down",
    "PartitionInactive": "the partition is inactive",
    "PartitionNodeLimit": "asks for more nodes than the partition allows",
    "PartitionTimeLimit": "asks for more time than the partition allows",
    "PartitionConfig": "asks for something the partition is not configured for",
    "ReqNodeNotAvail": "a required node is not available (down, drained or reserved)",
    "NodeDown": "a node it needs is down",
    "BadConstraints": "its constraints cannot be satisfied",
    "Reservation": "waiting for its reservation to start",
    "Licenses": "waiting for licenses",
    "InvalidAccount": "the account is invalid",
    "InvalidQOS": "the QOS is invalid",
    "QOSUsageThreshold": "the QOS usage threshold has been reached",
    "AssocGrpGRES": "the account's group GPU limit has been reached",
    "QOSMaxGRESPerUser": "the per-user GPU limit of the QOS has been reached",
    "QOSMaxJobsPerUserLimit": "the per-user job limit of the QOS has been reached",
    "AssocMaxJobsLimit": "the account's job limit has been reached",
    "AssocGrpCpuLimit": "the account's group CPU limit has been reached",
    "AssocGrpMemLimit": "the account's group memory limit has been reached",
    "QOSGrpCpuLimit": "the QOS group CPU limit has been reached",
    "launch_failed_requeued_held": "launching failed; requeued and held",
    "BeginTime_Dependency": "waiting for its start time and another job",
    "Cleaning": "waiting for the previous run of this job to be cleaned up",
    "Prolog": "its prolog is running",
    "FrontEndDown": "no front-end node is available",
    "NonZeroExitCode": "exited with a non-zero exit code",
    "RaisedSignal": "was killed by a signal",
    "TimeLimit": "reached its time limit",
    "InactiveLimit": "reached the inactivity limit",
    "OutOfMemory": "ran out of memory",
    "SystemFailure": "failure of the Slurm system, a file system or the network",
    "JobLaunchFailure": "the job could not be launched (file system, permissions...)",
    "NodeDownFail": "its node went down",
    "BurstBufferOperation": "a burst buffer operation failed",
}

_WORDS = {
    "Assoc": "association",
    "Grp": "group",
    "QOS": "QOS",
    "Max": "max",
    "Per": "per",
    "Mem": "memory",
    "Cpu": "CPU",
    "GRES": "GPU/GRES",
    "Req": "requested",
    "Min": "minutes",
}


def reason_in_words(reason: str) -> str:
    """'Resources' -> 'waiting for resources...'; unknown codes are split into words."""
    if reason in REASONS:
        return REASONS[reason]
    words = re.findall(r"QOS|GRES|[A-Z][a-z]+|[A-Z]+(?![a-z])|[a-z]+|\d+", reason)
    text = " ".join(_WORDS.get(w, w.lower()) for w in words) or reason
    return text[:1].upper() + text[1:] if text else ""


def signal_name(number: int) -> str:
    try:
        return _signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe(job: JobInfo) -> tuple[JobState, str]:
    """Our state for a Slurm job and a plain sentence saying why, e.g.
    (PENDING, "Waiting for resources (CPUs, memory or GPUs) to become free")."""
    if job.restart_count:
        # Slurm requeued the job itself (22.05's REST API cannot turn requeueing off, and
        # 22.05 never shows the NODE_FAIL): the job script refuses to run a second time,
        # so this attempt is over and the run is resubmitted as a new attempt.
        return JobState.INFRA_FAILED, (
            "Slurm requeued it after a node failure or preemption; it is resubmitted as a new attempt"
        )
    state, meaning = STATE_MAP.get(job.state, (JobState.PENDING, f"in Slurm state {job.state}"))
    flags = set(job.state_flags)
    if state.is_terminal and flags & UNSETTLED_FLAGS:
        # e.g. COMPLETED+COMPLETING: processes still being cleaned up; the final
        # state (and exit code) is only trustworthy once the flag is gone
        state, meaning = JobState.RUNNING, f"finishing ({job.state.lower()})"
    if "REQUEUED" in flags and job.state == "PENDING":
        meaning = "requeued by Slurm"
    detail = reason_in_words(job.reason)
    if job.state == "FAILED" and job.exit_code is not None:
        meaning = f"exited with code {job.exit_code}"
    if job.signal and job.state in ("FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY"):
        meaning = f"{meaning}; killed by {signal_name(job.signal)}"
    if state is JobState.PENDING and detail:
        return state, detail[:1].upper() + detail[1:]
    if detail and state.is_terminal and job.reason not in ("NonZeroExitCode",):
        meaning = f"{meaning} ({detail})"
    return state, meaning[:1].upper() + meaning[1:]


def exit_code_of(job: JobInfo) -> int | None:
    """The exit status to record: the process's own, or 128+N when signal N ended it."""
    if job.exit_code is not None:
        return job.exit_code
    if job.signal:
        return 128 + job.signal
    return None
