"""What can go wrong when talking to slurmrestd, as exceptions the backend understands.

All derive from BackendError so the orchestrator treats them like any backend failure:
`permanent=False` (keep the run queued, retry later) unless the request itself is bad.
"""

from __future__ import annotations

from orchestrator.cluster.backends.base import BackendError

# Slurm error numbers we act on (the slurm_errno.h enum, which counts up from 2000)
ESLURM_ACCESS_DENIED = 2002
ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE = 2014
ESLURM_INVALID_JOB_ID = 2017
ESLURM_TRANSITION_STATE_NO_UPDATE = 2020  # e.g. signalling a job that is not running yet
ESLURM_JOB_HELD = 2042  # informational: "Job is in held state", sent with a successful submit
SLURM_PROTOCOL_AUTHENTICATION_ERROR = 1007

# Errors about the job description itself: the same request can never succeed.
PERMANENT_ERRORS = {
    2000,  # ESLURM_INVALID_PARTITION_NAME
    2001,  # ESLURM_DEFAULT_PARTITION_NOT_SET
    2003,  # ESLURM_JOB_MISSING_REQUIRED_PARTITION_GROUP
    2004,  # ESLURM_REQUESTED_NODES_NOT_IN_PARTITION
    2005,  # ESLURM_TOO_MANY_REQUESTED_CPUS
    2006,  # ESLURM_TOO_MANY_REQUESTED_NODES
    2008,  # ESLURM_JOB_MISSING_SIZE_SPECIFICATION
    2012,  # ESLURM_PATHNAME_TOO_LONG
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
    2018,  # ESLURM_INVALID_NODE_NAME
    2029,  # ESLURM_INVALID_FEATURE
    2044,  # ESLURM_INVALID_BANK_ACCOUNT
    2045,  # ESLURM_INVALID_TASK_MEMORY
    2046,  # ESLURM_INVALID_ACCOUNT
    2047,  # ESLURM_INVALID_LICENSES
    2049,  # ESLURM_ACCOUNTING_POLICY
    2050,  # ESLURM_INVALID_TIME_LIMIT
    2127,  # v0.0.38 parser: "environment must be set"
    9001,  # v0.0.38 parser: "Failure during parsing"
}


class SlurmError(BackendError):
    """slurmrestd answered, but with an error. `code` is Slurm's error number when known."""

    def __init__(
        self, message: str, *, code: int | None = None, http_status: int | None = None, permanent: bool = False
    ):
        super().__init__(message, permanent=permanent)
        self.code = code
        self.http_status = http_status


class SlurmAuthError(SlurmError):
    """Token missing, wrong, expired or for another user. Never permanent: a new token fixes it."""

    def __init__(self, detail: str, *, http_status: int | None = None):
        super().__init__(f"Slurm authentication failed: {detail}", http_status=http_status)


class SlurmUnreachable(SlurmError):
    """No HTTP answer at all (refused, timed out, DNS...). `uncertain`: the request was sent
    (a POST or DELETE that timed out or lost its connection), so slurmrestd may have acted on it."""

    def __init__(self, url: str, detail: str, *, uncertain: bool = False):
        super().__init__(f"slurmrestd unreachable at {url}: {detail}")
        self.url = url
        self.uncertain = uncertain


class SlurmJobNotFound(SlurmError):
    def __init__(self, job_id: str, message: str = "", *, http_status: int | None = None):
        super().__init__(
            message or f"Slurm does not know job {job_id}", code=ESLURM_INVALID_JOB_ID, http_status=http_status
        )
        self.job_id = job_id
