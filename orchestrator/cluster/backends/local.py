"""The `local` backend: each job is a subprocess on this machine, in its own process group.

Job ids are the job names (`opl-<run>-a<attempt>`), unique by construction. Each job's
bookkeeping lives in LOCAL_JOBS_DIR/<name>/ (job.json while it runs, exit.json once it ended);
its stdout and stderr go to files in the run directory.

Starting a job is guarded by an flock on LOCAL_JOBS_DIR/<name>/lock that the supervisor
inherits and holds for its whole life. A submitter killed at any point leaves either no
supervisor (the lock is free and nothing is recorded: a retry starts it) or one that holds the
lock (a retry finds it): never two.
"""

import fcntl
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings

from orchestrator.cluster.backends.base import BackendError, JobSpec, JobState, JobStatus
from orchestrator.cluster.backends.registry import REGISTRY

# Environment a local job inherits from the worker: nothing secret (no SECRET_KEY, no DATABASE_URL).
INHERITED_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "OMP_NUM_THREADS",
    "OPL_BENCHMARKS_DIR",
    "OPL_MODEL_CACHE",
)
CANCEL_MARKER = "cancel-requested"


class LocalBackend:
    name = "local"
    capabilities = REGISTRY[name].capabilities
    submit_timeout_s = 0.0  # submit holds the job's lock file: one start per name, however many submits

    def __init__(self, jobs_dir: Path | None = None):
        self.jobs_dir = Path(jobs_dir or settings.LOCAL_JOBS_DIR)
        self.jobs_dir.mkdir(parents=True, exist_ok=True)

    def log_paths(self, run_dir: Path, attempt: int) -> dict[str, Path]:
        logs = Path(run_dir) / "logs"
        return {"stdout": logs / f"attempt-{attempt}.out", "stderr": logs / f"attempt-{attempt}.err"}

    def find(self, name: str) -> str | None:
        """The name if its job was started (running, starting or ended), else None."""
        job_dir = self.jobs_dir / name
        if not job_dir.is_dir():
            return None
        return name if self._started(job_dir) or _locked(job_dir / "lock") else None

    def submit(self, spec: JobSpec) -> str:
        if spec.nodes > 1:
            raise BackendError(
                f"the local backend runs on this one machine; the run asks for {spec.nodes} nodes "
                "(resources.nodes): use the slurm backend, or 1 node",
                permanent=True,
            )
        job_dir = self.jobs_dir / spec.name
        job_dir.mkdir(parents=True, exist_ok=True)
        lock = os.open(job_dir / "lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            if not _lock_briefly(lock):
                return spec.name  # another submitter is starting it, or its supervisor runs
            if self._started(job_dir):
                return spec.name  # a retried submit never starts a second job
            self._spawn(spec, job_dir, lock)
        finally:
            os.close(lock)
        return spec.name

    def _spawn(self, spec: JobSpec, job_dir: Path, lock: int) -> None:
        logs = self.log_paths(spec.run_dir, spec.attempt)
        logs["stdout"].parent.mkdir(parents=True, exist_ok=True)
        env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
        env.update(spec.env)
        env["PYTHONPATH"] = str(settings.BASE_DIR)
        supervisor = [
            sys.executable,
            "-m",
            "orchestrator.cluster.backends.local_supervisor",
            str(job_dir),
            "--stdout",
            str(logs["stdout"]),
            "--stderr",
            str(logs["stderr"]),
            "--cwd",
            str(spec.run_dir),
            "--grace-s",
            str(settings.CANCEL_GRACE_SECONDS),
            "--time-limit-s",
            str((spec.time_limit_min or 0) * 60),
            "--lock-fd",
            str(lock),
            "--",
            *spec.argv,
        ]
        try:
            with open(job_dir / "supervisor.log", "ab") as log:
                # pass_fds: the supervisor shares our lock and keeps it after we close our copy
                subprocess.Popen(
                    supervisor,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=env,
                    cwd=settings.BASE_DIR,
                    start_new_session=True,
                    pass_fds=(lock,),
                )
        except OSError as exc:
            raise BackendError(f"could not start local job: {exc}", permanent=True) from exc
        (job_dir / "submitted").touch()

    @staticmethod
    def _started(job_dir: Path) -> bool:
        return any((job_dir / f).exists() for f in ("submitted", "job.json", "exit.json"))

    def statuses(self, job_ids: list[str]) -> dict[str, JobStatus]:
        answer = {}
        for job_id in job_ids:
            status = self._status(job_id)
            if status is not None:
                answer[job_id] = status
        return answer

    def cancel(self, job_id: str) -> None:
        job_dir = self.jobs_dir / job_id
        if not self.find(job_id) or (job_dir / "exit.json").exists():
            return
        # The marker covers a job whose supervisor has not written job.json yet: it checks for
        # the marker right after writing job.json, so one of the two always sees the other.
        (job_dir / CANCEL_MARKER).touch()
        info = self._read(job_dir / "job.json")
        if info is None:
            return
        try:
            os.kill(info["supervisor_pid"], 15)  # SIGTERM: the supervisor forwards SIGUSR1, then kills
        except ProcessLookupError:
            pass

    def is_configured(self) -> bool:
        return True

    def requeues_on_timeout(self, profile: str) -> bool:
        return False  # no profiles: a time limit is the run's own

    def fixed_gpus(self) -> int | None:
        return None

    def health(self) -> dict:
        """This machine's cores and memory, and the jobs whose supervisors are alive."""
        running = [
            d.name
            for d in self.jobs_dir.iterdir()
            if d.is_dir() and not (d / "exit.json").exists() and _locked(d / "lock")
        ]
        return {"cores": settings.LOCAL_CORES, "memory_gb": _memory_gb(), "jobs": sorted(running)}

    def _status(self, job_id: str) -> JobStatus | None:
        job_dir = self.jobs_dir / job_id
        if not self.find(job_id):
            return None
        ended = self._read(job_dir / "exit.json")
        info = self._read(job_dir / "job.json")
        started = _dt(info["started_at"]) if info else None
        if ended is not None:
            return _final_status(job_id, ended, started)
        if info is None:
            if not _locked(job_dir / "lock"):
                return None  # the supervisor died before it started the job (see supervisor.log)
            return JobStatus(job_id, JobState.PENDING, "starting", reason="starting the process")
        if not _alive(info["supervisor_pid"], job_id):
            return None  # vanished without a final state: the caller decides when it is lost
        return JobStatus(
            job_id,
            JobState.RUNNING,
            "running",
            nodes="localhost",
            started_at=started,
            reason=f"pid {info['child_pid']}",
        )

    @staticmethod
    def _read(path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None


def _final_status(job_id: str, ended: dict, started: datetime | None) -> JobStatus:
    code = ended["exit_code"]
    common = {"exit_code": code, "nodes": "localhost", "started_at": started, "ended_at": _dt(ended["ended_at"])}
    if ended.get("cancelled"):
        return JobStatus(job_id, JobState.CANCELLED, "cancelled", reason="cancelled", **common)
    if ended.get("timed_out"):
        return JobStatus(job_id, JobState.TIMEOUT, "timeout", reason="time limit reached", **common)
    if code == 0:
        return JobStatus(job_id, JobState.SUCCEEDED, "exited", **common)
    if code < 0:
        return JobStatus(job_id, JobState.FAILED, "signaled", reason=f"killed by signal {-code}", **common)
    return JobStatus(job_id, JobState.FAILED, "exited", reason=f"exit code {code}", **common)


def _lock_briefly(fd: int, tries: int = 20) -> bool:
    """Take the start lock; a few tries ride over another process's momentary probe."""
    for _ in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            time.sleep(0.01)
    return False


def _locked(path: Path) -> bool:
    """Whether a submitter or a live supervisor holds the job's start lock."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _alive(pid: int, job_id: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return job_id.encode() in cmdline  # guards against a recycled pid


def _memory_gb() -> dict[str, float]:
    """Total and available memory from /proc/meminfo (GB), empty where there is none."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    except OSError:
        return {}
    kb = {k: int(v.split()[0]) for k, v in info.items() if k in ("MemTotal", "MemAvailable")}
    return {"total": round(kb.get("MemTotal", 0) / 2**20, 1), "available": round(kb.get("MemAvailable", 0) / 2**20, 1)}


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)
