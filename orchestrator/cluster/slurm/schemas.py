"""Version-neutral shapes of what we send to and read from slurmrestd.

The wire adapters (wire.py) turn these into each API version's JSON and back, so the
rest of the project never sees `{"set": true, "number": N}` or raw wait statuses.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class JobRequest(BaseModel):
    """One batch job to submit. Values here are already validated (jobscript.py)."""

    model_config = ConfigDict(frozen=True)

    name: str
    script: str
    environment: dict[str, str]
    working_directory: str
    standard_output: str
    standard_error: str
    comment: str = ""
    partition: str = ""
    account: str = ""
    qos: str = ""
    gpus: int = Field(default=0, ge=0)  # per node
    nodes: int = Field(default=1, ge=1)
    tasks_per_node: int = Field(default=1, ge=1)
    gpu_type: str = ""
    cpus_per_task: int = Field(default=1, ge=1)
    memory_mb: int | None = Field(default=None, ge=1)
    time_limit_min: int | None = Field(default=None, ge=1)
    container: str = ""
    hold: bool = False
    # The orchestrator requeues (as a new attempt) itself; Slurm's own requeue would
    # reuse the job id and hide the NODE_FAIL from us.
    requeue: bool = False


class JobInfo(BaseModel):
    """A job as slurmrestd reports it, normalised across API versions."""

    job_id: str
    name: str = ""
    user: str = ""
    state: str  # base state, e.g. "RUNNING", "NODE_FAIL"
    state_flags: list[str] = []  # e.g. ["COMPLETING"], ["REQUEUED"]
    reason: str = ""  # Slurm's reason code, e.g. "Resources", "NonZeroExitCode"
    exit_code: int | None = None  # the process's exit status, when it exited
    signal: int | None = None  # the signal that ended it, when one did
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None  # for a running job, Slurm's forecast (start + limit)
    nodes: str = ""
    partition: str = ""
    comment: str = ""
    standard_output: str = ""
    standard_error: str = ""
    gres_detail: list[str] = []
    priority: int | None = None
    time_limit_min: int | None = None
    restart_count: int = 0  # >0: Slurm requeued the job itself (e.g. after a node failure)


class SubmitResult(BaseModel):
    job_id: str
    warnings: list[str] = []  # e.g. "Job is in held state" for a held submit


class PingInfo(BaseModel):
    hostname: str
    up: bool
    mode: str = ""


class NodeInfo(BaseModel):
    name: str
    state: str  # e.g. "IDLE", "MIXED", "DOWN+DRAIN"
    reason: str = ""
    cpus: int = 0
    cpus_allocated: int = 0
    memory_mb: int = 0
    gpus: int = 0
    gpus_used: int = 0
    partitions: list[str] = []


class PartitionInfo(BaseModel):
    name: str
    state: str
    nodes: str = ""
    total_cpus: int = 0
    total_nodes: int = 0
    is_default: bool = False
