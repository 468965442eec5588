"""The `slurm` cluster backend: runs as Slurm batch jobs, through slurmrestd.

Idempotent submission: each attempt's job is named opl-<run>-a<attempt> (and its comment
carries both ids), and `submit` looks the name up first, so a submit task retried after
a crash finds the job it already created. The look-up and the POST are two requests, so two
submits of one attempt at once would both create a job: services.run_submit lets one through
at a time, and holds a claim for at least `submit_timeout_s`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.cluster.backends.base import BackendError, JobSpec, JobState, JobStatus
from orchestrator.cluster.backends.registry import REGISTRY
from orchestrator.cluster.slurm import jobscript, logs, states
from orchestrator.cluster.slurm.auth import SlurmCredentials
from orchestrator.cluster.slurm.client import SlurmClient
from orchestrator.cluster.slurm.config import SlurmConfig
from orchestrator.cluster.slurm.errors import SlurmAuthError, SlurmError, SlurmJobNotFound, SlurmUnreachable
from orchestrator.cluster.slurm.jobscript import SlurmProfile, UnsafeValue
from orchestrator.cluster.slurm.profiles import load_profile
from orchestrator.cluster.slurm.schemas import JobInfo

_clients: dict[SlurmConfig, SlurmClient] = {}
_clients_lock = threading.Lock()


def client_from_settings() -> SlurmClient:
    """One client per configuration, so API version discovery happens once per process."""
    config = SlurmConfig.from_settings()
    with _clients_lock:
        if config not in _clients:
            if not config.url:
                raise BackendError(
                    "SLURM_REST_URL is not set: the slurm backend has no cluster to talk to", permanent=True
                )
            credentials = SlurmCredentials(config.user, token=config.token, key_file=config.key_file or None)
            _clients[config] = SlurmClient(
                config.url, credentials, api_version=config.api_version, timeout_s=config.timeout_s
            )
        return _clients[config]


def to_status(job: JobInfo) -> JobStatus:
    state, reason = states.describe(job)
    return JobStatus(
        job_id=job.job_id,
        state=state,
        native_state="+".join([job.state, *job.state_flags, *(["RESTARTED"] if job.restart_count else [])]),
        reason=reason,
        exit_code=states.exit_code_of(job) if state.is_terminal and not job.restart_count else None,
        nodes=job.nodes,
        # for a pending job Slurm's start_time is a forecast too
        started_at=job.start_time if state is not JobState.PENDING else None,
        # for a running job Slurm's end_time is a forecast (start + time limit)
        ended_at=job.end_time if state.is_terminal else None,
    )


class SlurmBackend:
    name = "slurm"
    capabilities = REGISTRY[name].capabilities

    def __init__(
        self,
        client: SlurmClient | None = None,
        profiles: Callable[[str], SlurmProfile] = load_profile,
        run_dir_mode: int | None = None,
        accounting: bool | None = None,
    ):
        self._client = client
        self._profiles = profiles
        self._run_dir_mode = run_dir_mode
        self._use_accounting = accounting

    @property
    def client(self) -> SlurmClient:
        if self._client is None:
            self._client = client_from_settings()
        return self._client

    # ------------------------------------------------------------------ protocol
    @property
    def submit_timeout_s(self) -> float:
        """The longest `submit` takes before it raises: the API version discovery (a process's
        first call), the look-up by name and the POST, each up to the client's call timeout."""
        try:
            return 3 * self.client.call_timeout_s()
        except BackendError:  # not configured: nothing can be submitted anyway
            return 0.0

    def submit(self, spec: JobSpec) -> str:
        try:
            request = jobscript.build_request(spec, self._profiles(spec.profile))
        except (UnsafeValue, LookupError, ValueError) as exc:
            raise BackendError(str(exc), permanent=True) from None
        existing = self._find(spec.name, comment=request.comment)
        if existing:
            return existing
        self._prepare_run_dir(Path(request.working_directory))
        return self.client.submit(request).job_id

    def find(self, name: str) -> str | None:
        """Our newest job with this name (by the configured user), if Slurm still has it."""
        return self._find(name)

    def _find(self, name: str, comment: str | None = None) -> str | None:
        mine = [
            j
            for j in self.client.jobs()
            if j.name == name
            and (not j.user or j.user == self.client.credentials.user)
            and (comment is None or j.comment == comment)
        ]
        if not mine:
            return None
        return max(mine, key=lambda j: int(j.job_id) if j.job_id.isdigit() else 0).job_id

    def statuses(self, job_ids: list[str]) -> dict[str, JobStatus]:
        if not job_ids:
            return {}
        wanted = {str(j) for j in job_ids}
        found = {j.job_id: to_status(j) for j in self.client.jobs() if j.job_id in wanted}
        if self._accounting():
            # slurmctld forgets finished jobs after MinJobAge; slurmdbd keeps their final state
            for job_id in sorted(wanted - set(found)):
                try:
                    found[job_id] = to_status(self.client.accounting_job(job_id))
                except SlurmError:
                    pass  # unknown there too: the caller's grace period decides
        return found

    def _accounting(self) -> bool:
        if self._use_accounting is None:
            self._use_accounting = SlurmConfig.from_settings().accounting
        return self._use_accounting

    def cancel(self, job_id: str) -> None:
        try:
            self.client.cancel(job_id)
        except SlurmJobNotFound:
            pass  # already gone: nothing left to stop

    def log_paths(self, spec_run_dir: Path, attempt: int) -> dict[str, Path]:
        return {k: Path(v) for k, v in jobscript.log_paths(str(spec_run_dir), attempt).items()}

    # ------------------------------------------------------------------ extras
    def log_tail(self, run_dir: Path, attempt: int, lines: int = 40) -> dict[str, str]:
        """The end of the attempt's stdout and stderr, read from the shared run directory."""
        return {k: logs.tail(p, lines) for k, p in self.log_paths(run_dir, attempt).items()}

    def signal(self, job_id: str, signal: str = "SIGUSR1") -> None:
        """SIGUSR1 makes the trainer checkpoint and exit (status 75)."""
        self.client.signal(job_id, signal)

    def status(self, job_id: str) -> JobStatus | None:
        try:
            return to_status(self.client.job(job_id))
        except SlurmJobNotFound:
            return None

    def is_configured(self) -> bool:
        return bool(SlurmConfig.from_settings().url)

    def requeues_on_timeout(self, profile: str) -> bool:
        try:
            return self._profiles(profile).requeue_on_timeout
        except LookupError:
            return False

    def fixed_gpus(self) -> int | None:
        """The default profile's GPU count: runs name no profile of their own, so they use it."""
        from orchestrator.cluster.models import ClusterProfile

        return ClusterProfile.objects.filter(is_default=True).values_list("gpus", flat=True).first()

    def health(self) -> dict[str, Any]:
        """Reachability, API version, partitions, nodes with GPU counts and our jobs.
        Never raises: failures are reported in "error" (and "auth_failed")."""
        url = self._client.base_url if self._client else SlurmConfig.from_settings().url
        report: dict[str, Any] = {
            "url": url,
            "reachable": False,
            "api_version": "",
            "slurm_release": "",
            "partitions": [],
            "nodes": [],
            "jobs": [],
            "error": "",
            "auth_failed": False,
        }
        try:
            client = self.client
            report["url"] = client.base_url
            # ping alone is not enough: 24.11 answers a bad token's ping with 200 "DOWN"
            pings = client.ping()
            report["reachable"] = True
            report["api_version"] = client.wire.api_version
            report["slurm_release"] = client.slurm_release
            report["controller_up"] = any(p.up for p in pings)
            report["nodes"] = [n.model_dump() for n in client.nodes()]
            report["partitions"] = [p.model_dump() for p in client.partitions()]
            ours = [j for j in client.jobs() if j.name.startswith("opl-") and j.user in ("", client.credentials.user)]
            report["jobs"] = [
                {
                    "job_id": j.job_id,
                    "name": j.name,
                    "state": s.state.value,
                    "native_state": s.native_state,
                    "reason": s.reason,
                    "nodes": j.nodes,
                }
                for j in ours
                if not (s := to_status(j)).state.is_terminal
            ]
        except SlurmError as exc:
            report["error"] = str(exc)
            report["auth_failed"] = isinstance(exc, SlurmAuthError)
            if not isinstance(exc, SlurmUnreachable):
                report["reachable"] = True
        except (BackendError, ValueError) as exc:  # not configured, or configured wrongly
            report["error"] = str(exc)
        return report

    def _prepare_run_dir(self, run_dir: Path) -> None:
        """The job writes its logs (opened by slurmd as the job user) and checkpoints here."""
        mode = self._run_dir_mode
        if mode is None:
            mode = SlurmConfig.from_settings().run_dir_mode
        log_dir = run_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        if mode is not None:
            for d in (run_dir, log_dir):
                os.chmod(d, mode)
            for f in run_dir.iterdir():
                if f.is_file():
                    os.chmod(f, mode & 0o666 | 0o444)


__all__ = ["SlurmBackend", "to_status", "client_from_settings", "JobState"]
