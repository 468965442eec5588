"""Cluster profiles and the batch script rendered from them.

Rule: no value a user (or a run config) supplies is ever put into shell text. Names
(partition, account, qos, GPU type) and paths are checked against strict patterns and
travel in Slurm's JSON job description; the command line and all run values travel in
the job environment and the script reads them back as "${!name}" array elements.
The only shell text is fixed template text plus the profile's set-up lines, which an
administrator writes (module loads, conda activation) and which are shown verbatim.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.cluster.backends.base import JobSpec

from .schemas import JobRequest

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
# absolute, no '..', and no character a shell or Slurm's %-expansion would act on
PATH_RE = re.compile(r"^/[A-Za-z0-9_./+-]*\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class UnsafeValue(ValueError):
    """A value refused because it could be read as shell or Slurm syntax; names the field."""

    def __init__(self, field: str, value: str, reason: str):
        super().__init__(f"{field}: {reason} (got {value!r})")
        self.field = field
        self.reason = reason


def check_name(field: str, value: str) -> str:
    if value and not NAME_RE.match(value):
        bad = sorted({c for c in value if not (c.isalnum() or c in "_.-")})
        why = (
            f"contains {' '.join(repr(c) for c in bad)}"
            if bad
            else "must start with a letter or digit, at most 64 characters"
        )
        raise UnsafeValue(field, value, f"{why}; only letters, digits, '_', '.' and '-' are allowed")
    return value


def check_path(field: str, value: str) -> str:
    if not value:
        return value
    if not value.startswith("/"):
        raise UnsafeValue(field, value, "must be an absolute path")
    bad = sorted({c for c in value if not (c.isalnum() or c in "_./+-")})
    if bad:
        raise UnsafeValue(
            field,
            value,
            f"contains {' '.join(repr(c) for c in bad)}; only letters, digits, '_', '.', '/', '+' and '-' are allowed",
        )
    if ".." in PurePosixPath(value).parts:
        raise UnsafeValue(field, value, "must not contain '..'")
    return value


class SlurmProfile(BaseModel):
    """Where and how runs are placed on a Slurm cluster (admin-edited)."""

    model_config = ConfigDict(frozen=True)

    name: str = "default"
    partition: str = ""
    account: str = ""
    qos: str = ""
    gpu_type: str = ""  # e.g. "a100": asks for gpu:a100:N; empty asks for any GPU
    gpus: int | None = Field(default=None, ge=0)  # overrides the run's request when set
    cpus: int | None = Field(default=None, ge=1)
    mem_gb: float | None = Field(default=None, gt=0)
    time_limit_min: int | None = Field(default=None, ge=1)
    setup_lines: list[str] = []  # e.g. "module load cuda/12.4", "source /opt/conda/bin/activate rl"
    container: str = ""  # OCI bundle path for Slurm's --container
    path: str = DEFAULT_PATH  # PATH inside the job
    requeue_on_timeout: bool = False

    @field_validator("partition", "account", "qos", "gpu_type")
    @classmethod
    def _names(cls, v: str, info) -> str:  # type: ignore[no-untyped-def]
        return check_name(info.field_name, v)

    @field_validator("container")
    @classmethod
    def _container(cls, v: str) -> str:
        return check_path("container", v)

    @field_validator("path")
    @classmethod
    def _path_var(cls, v: str) -> str:
        for part in v.split(":"):
            check_path("path", part)
        return v

    @field_validator("setup_lines")
    @classmethod
    def _lines(cls, v: list[str]) -> list[str]:
        for i, line in enumerate(v):
            if "\n" in line or "\r" in line or "\0" in line:
                raise UnsafeValue(f"setup_lines[{i}]", line, "one command per line")
        return v


def log_paths(run_dir: str, attempt: int) -> dict[str, str]:
    return {"stdout": f"{run_dir}/logs/attempt-{attempt}.out", "stderr": f"{run_dir}/logs/attempt-{attempt}.err"}


def render_script(profile: SlurmProfile, run_id: int, attempt: int, tasks: int = 1) -> str:
    """The batch script. Only integers and the admin's set-up lines are formatted in.

    With several tasks (a run on several nodes: one per node) the command runs once per task
    through `srun`, each a `python -m trainer.launch --rendezvous slurm` that joins the others in a
    torchrun static rendezvous read from the allocation (trainer/launch.py).
    """
    lines = [
        "#!/bin/bash",
        f"# OffPolicy Lab run {int(run_id)}, attempt {int(attempt)}, profile {profile.name!r}"
        if NAME_RE.match(profile.name)
        else f"# OffPolicy Lab run {int(run_id)}, attempt {int(attempt)}",
        "set -eo pipefail",
        # Slurm may requeue a job by itself (node failure, preemption); the orchestrator
        # requeues runs as new attempts, so a second start of the same job must not train
        'if [ "${SLURM_RESTART_COUNT:-0}" != 0 ]; then',
        '  echo "Slurm restarted this job (restart ${SLURM_RESTART_COUNT}); '
        'OffPolicy Lab resubmits it as a new attempt" >&2',
        "  exit 1",
        "fi",
    ]
    if profile.setup_lines:
        lines += ["# --- set-up lines of the cluster profile", *profile.setup_lines, "# ---"]
    lines += [
        # the command arrives as OPL_ARGV_0..OPL_ARGV_{OPL_ARGC-1} in the environment
        "argv=()",
        'for ((i = 0; i < OPL_ARGC; i++)); do name="OPL_ARGV_$i"; argv+=("${!name}"); done',
        'cd -- "$OPL_RUN_DIR"',
    ]
    if int(tasks) > 1:
        # srun forwards Slurm's signals to every task and exits with the highest task exit code
        lines += [f'exec srun --ntasks={int(tasks)} --kill-on-bad-exit=0 -- "${{argv[@]}}"', ""]
    else:
        # exec: the trainer itself receives Slurm's signals (SIGUSR1, SIGTERM on cancel)
        lines += ['exec "${argv[@]}"', ""]
    return "\n".join(lines)


def job_comment(spec: JobSpec) -> str:
    """Run id and attempt, plus a fingerprint of the attempt's token when there is one: the
    name alone could match a job of another database (a reset test database, a staging
    dashboard on the same cluster account) that reused the run id."""
    comment = f"opl run={int(spec.run_id)} attempt={int(spec.attempt)}"
    token = spec.env.get("OPL_RUN_TOKEN", "")
    if token:
        comment += f" key={hashlib.sha256(token.encode()).hexdigest()[:12]}"
    return comment


def build_request(spec: JobSpec, profile: SlurmProfile) -> JobRequest:
    """The job description for one attempt; raises UnsafeValue naming the bad field."""
    run_dir = check_path("run_dir", str(spec.run_dir))
    if not spec.argv:
        raise ValueError("argv: the command to run is empty")
    env: dict[str, str] = {"PATH": profile.path, "HOME": run_dir}
    for key, value in spec.env.items():
        if not ENV_NAME_RE.match(key):
            raise UnsafeValue(f"env[{key!r}]", key, "is not a valid environment variable name")
        if "\0" in value:
            raise UnsafeValue(f"env[{key!r}]", value, "contains a NUL byte")
        env[key] = value
    for i, arg in enumerate(spec.argv):
        if "\0" in arg:
            raise UnsafeValue(f"argv[{i}]", arg, "contains a NUL byte")
        env[f"OPL_ARGV_{i}"] = arg
    env["OPL_ARGC"] = str(len(spec.argv))
    env["OPL_RUN_DIR"] = run_dir
    env.setdefault("OPL_RUN_ID", str(spec.run_id))
    env.setdefault("OPL_ATTEMPT", str(spec.attempt))
    logs = log_paths(run_dir, spec.attempt)
    gpus = profile.gpus if profile.gpus is not None else spec.gpus
    cpus = profile.cpus if profile.cpus is not None else spec.cpus
    mem_gb = profile.mem_gb if profile.mem_gb is not None else spec.mem_gb
    time_limit = profile.time_limit_min if profile.time_limit_min is not None else spec.time_limit_min
    return JobRequest(
        name=spec.name,
        script=render_script(profile, spec.run_id, spec.attempt, spec.nodes * spec.tasks_per_node),
        environment=env,
        working_directory=run_dir,
        standard_output=logs["stdout"],
        standard_error=logs["stderr"],
        comment=job_comment(spec),
        partition=profile.partition,
        account=profile.account,
        qos=profile.qos,
        gpus=gpus,
        nodes=spec.nodes,
        tasks_per_node=spec.tasks_per_node,
        gpu_type=profile.gpu_type,
        cpus_per_task=cpus,
        memory_mb=max(1, int(mem_gb * 1024)) if mem_gb else None,
        time_limit_min=time_limit,
        container=profile.container,
    )
