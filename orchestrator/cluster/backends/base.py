"""The one interface through which the dashboard talks to a cluster.

Views and tasks only ever see `ClusterBackend`; adding a backend (e.g. sbatch over SSH)
means adding a module here and an entry in `backends/registry.py`, nothing else.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol


class JobState(str, enum.Enum):
    """Backend-neutral job states; each backend maps its native states onto these."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Failed through the cluster's fault (node failure, preemption, boot failure...): requeueable.
    INFRA_FAILED = "infra_failed"
    TIMEOUT = "timeout"

    @property
    def is_terminal(self) -> bool:
        return self not in (JobState.PENDING, JobState.RUNNING)


@dataclass(frozen=True)
class JobSpec:
    """Everything a backend needs to start one attempt of one run."""

    run_id: int
    attempt: int
    run_dir: Path
    argv: list[str]  # the command, as an argument vector: never joined into shell text
    env: dict[str, str] = field(default_factory=dict)  # user values travel here, not in the script
    gpus: int = 0  # per node
    cpus: int = 1
    # Machines, and launcher tasks on each (trainer.launch: one torchrun agent per task). A run on
    # N nodes is N nodes x 1 task; the one-node Slurm test cluster stands in for 2 nodes with 1 x 2.
    nodes: int = 1
    tasks_per_node: int = 1
    mem_gb: float = 4.0
    time_limit_min: int | None = None
    profile: str = ""  # cluster profile name (partition, account... live in the profile)

    @property
    def name(self) -> str:
        """Job name that makes submission idempotent: looked up before every submit."""
        return job_name(self.run_id, self.attempt)


def job_name(run_id: int, attempt: int) -> str:
    return f"opl-{run_id}-a{attempt}"


@dataclass(frozen=True)
class JobStatus:
    job_id: str
    state: JobState
    native_state: str = ""  # e.g. Slurm's "NODE_FAIL"; "exited" for local
    reason: str = ""  # plain-words reason (pending reason, failure detail)
    exit_code: int | None = None
    nodes: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None


@dataclass(frozen=True)
class Capabilities:
    """What sets a backend apart, so callers ask it instead of testing its name."""

    # Jobs are placed by cluster profiles (ClusterProfile rows): a profile may requeue a run that
    # reaches its time limit, and the default one may fix every job's GPU count.
    profiles: bool = False
    # Jobs run on the dashboard's own machine: the cluster page shows its cores, memory and
    # whether the worker's periodic sync is alive.
    this_machine: bool = False
    # The backend talks to a cluster of its own: the cluster page shows whether it is reachable,
    # its partitions, nodes and our jobs there (`health()`), and its last error.
    own_cluster: bool = False


class BackendError(Exception):
    """A backend call failed. `permanent=False` means retrying later may succeed
    (cluster unreachable, auth expired); `permanent=True` means the request itself is bad
    (e.g. asks for more GPUs than exist) and the run should fail with this message.
    `uncertain=True`: a request that changes something was sent but no answer came (timed
    out, connection dropped), so it may have been carried out: a submit may have created the job."""

    def __init__(self, message: str, *, permanent: bool = False, uncertain: bool = False):
        super().__init__(message)
        self.permanent = permanent
        self.uncertain = uncertain


class ClusterBackend(Protocol):
    name: str
    capabilities: Capabilities

    # The longest one submit call can take before it gives up (0: the backend itself lets only one
    # submit of a name through at a time). A claim younger than this is never taken over.
    submit_timeout_s: float

    def submit(self, spec: JobSpec) -> str:
        """Start the job and return its id. Idempotent: if a job named spec.name already
        exists, return its id instead of creating a second one. Not atomic on every backend:
        the caller lets one submit of an attempt run at a time (services.run_submit)."""

    def find(self, name: str) -> str | None:
        """The id of our job with this name, or None."""

    def statuses(self, job_ids: list[str]) -> dict[str, JobStatus]:
        """Current status of each job, in one request where the backend allows it.
        Ids the backend no longer knows are absent from the answer (not failed)."""

    def cancel(self, job_id: str) -> None:
        """Graceful stop: the trainer gets SIGUSR1/SIGTERM, checkpoints and exits."""

    def log_paths(self, spec_run_dir: Path, attempt: int) -> dict[str, Path]:
        """Where stdout and stderr of an attempt are written: {"stdout": ..., "stderr": ...}."""

    def health(self) -> dict:
        """What the cluster page shows of this backend (see Capabilities)."""

    def is_configured(self) -> bool:
        """Its settings are given, so its cluster can be reported on even when another backend runs jobs."""

    def requeues_on_timeout(self, profile: str) -> bool:
        """A job of this cluster profile that reaches its time limit deserves another attempt."""

    def fixed_gpus(self) -> int | None:
        """The GPU count every job gets whatever it asks, if the backend fixes one."""
