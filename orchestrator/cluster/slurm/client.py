"""A small typed slurmrestd client (httpx + pydantic).

- Picks the newest API version the server offers (from /openapi/v3) unless told one.
- Checks bodies, not only status codes: slurmrestd reports errors inside 200 answers
  (v0.0.40+ DELETE) and answers 500/511 for authentication failures.
- Retries with backoff only when the connection could not be made (nothing was sent,
  so even a submit is safe to resend); everything else is reported at once.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import httpx

from .auth import SlurmCredentials, token_expiry
from .errors import (
    ESLURM_INVALID_JOB_ID,
    PERMANENT_ERRORS,
    SLURM_PROTOCOL_AUTHENTICATION_ERROR,
    SlurmAuthError,
    SlurmError,
    SlurmJobNotFound,
    SlurmUnreachable,
)
from .schemas import JobInfo, JobRequest, NodeInfo, PartitionInfo, PingInfo, SubmitResult
from .wire import SUPPORTED_VERSIONS, WireFormat, error_list, status_errors, version_number, wire_for

log = logging.getLogger(__name__)

ESLURM_ALREADY_DONE = 2021  # "Job/step already completing or completed"


class SlurmClient:
    def __init__(
        self,
        base_url: str,
        credentials: SlurmCredentials,
        *,
        api_version: str = "auto",
        timeout_s: float = 10.0,
        connect_retries: int = 3,
        backoff_s: float = 0.5,
        transport: httpx.BaseTransport | None = None,
    ):
        if not re.match(r"^https?://[^\s]+$", base_url or ""):
            raise ValueError(f"SLURM_REST_URL: not an http(s) URL: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.credentials = credentials
        self._configured_version = api_version or "auto"
        if self._configured_version != "auto" and self._configured_version not in SUPPORTED_VERSIONS:
            raise ValueError(
                f"SLURM_REST_API_VERSION: {api_version!r} is not one of {', '.join(SUPPORTED_VERSIONS)} (or 'auto')"
            )
        self.connect_retries = connect_retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)
        self._wire: WireFormat | None = None
        self.slurm_release = ""

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SlurmClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call_timeout_s(self) -> float:
        """The longest one call takes before it raises, when slurmrestd accepts connections: the
        connect back-off, then the request's timeout."""
        return self.backoff_s * (2**self.connect_retries - 1) + self.timeout_s

    # ------------------------------------------------------------------ plumbing
    def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        delay = self.backoff_s
        for attempt in range(self.connect_retries + 1):
            try:
                return self._http.request(method, path, headers=self.credentials.headers(), **kw)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # The request never reached the server: resending cannot duplicate anything.
                if attempt == self.connect_retries:
                    raise SlurmUnreachable(self.base_url, str(exc) or type(exc).__name__) from None
                log.info("slurmrestd at %s not reachable (%s); retry in %.1fs", self.base_url, exc, delay)
                time.sleep(delay)
                delay *= 2
            except httpx.TimeoutException as exc:
                # Sent, but no answer in time: it may have acted, so let the caller decide.
                raise SlurmUnreachable(
                    self.base_url, f"no answer within the timeout ({type(exc).__name__})", uncertain=method != "GET"
                ) from None
            except httpx.TransportError as exc:  # e.g. the connection dropped before the answer
                raise SlurmUnreachable(
                    self.base_url, str(exc) or type(exc).__name__, uncertain=method != "GET"
                ) from None
        raise AssertionError("unreachable")

    def _auth_error(self, detail: str, status: int) -> SlurmAuthError:
        token = self.credentials.headers().get("X-SLURM-USER-TOKEN", "")
        exp = token_expiry(token)
        if exp is not None and exp < time.time():
            detail = f"the token expired at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(exp))}"
        return SlurmAuthError(f"{detail} (user {self.credentials.user!r}, HTTP {status})", http_status=status)

    def _call(
        self, method: str, endpoint: str, *, job_id: str | None = None, accounting: bool = False, **kw: Any
    ) -> dict[str, Any]:
        path = self.wire.accounting_path(endpoint) if accounting else self.wire.path(endpoint)
        resp = self._send(method, path, **kw)
        try:
            body = resp.json()
        except ValueError:
            body = resp.text
        return self._check(resp.status_code, body, f"{method} {path}", job_id=job_id)

    def _check(self, status: int, body: Any, what: str, *, job_id: str | None = None) -> dict[str, Any]:
        if status == 401:
            raise self._auth_error("no token or the token was refused", status)
        if not isinstance(body, dict):
            raise SlurmError(f"{what}: HTTP {status}: {str(body)[:200]}", http_status=status)
        errors = error_list(body) + status_errors(body)
        codes = {code for code, _ in errors}
        if status == 511 or SLURM_PROTOCOL_AUTHENTICATION_ERROR in codes:
            raise self._auth_error("the token was refused", status)
        if self.wire.number == 38 and status == 500 and errors and codes <= {-1, None}:
            # 22.05 reports a wrong, expired or other user's token only as "Unspecified
            # error" (-1) with an unrelated description; it reports real failures by number.
            raise self._auth_error("the token was refused", status)
        if status < 400 and "job_id" in body and "status" not in body:
            return body  # a submit succeeded; its "errors" are notes (e.g. 2042 job held)
        if not errors and status < 400:
            return body
        code, message = next(((c, m) for c, m in errors if c != 9001), errors[0] if errors else (None, ""))
        if code == ESLURM_INVALID_JOB_ID and job_id is not None:
            raise SlurmJobNotFound(job_id, f"Slurm does not know job {job_id}: {message}", http_status=status)
        raise SlurmError(
            f"{message} (Slurm error {code}, HTTP {status})"
            if code is not None
            else f"{what}: HTTP {status}: {message or 'no detail'}",
            code=code,
            http_status=status,
            permanent=code in PERMANENT_ERRORS,
        )

    # ------------------------------------------------------------------ version
    @property
    def wire(self) -> WireFormat:
        if self._wire is None:
            version = self._configured_version
            if version == "auto":
                version = self.discover_version()
            self._wire = wire_for(version)
        return self._wire

    def offered_versions(self) -> list[str]:
        """The /slurm/vX versions the server documents in /openapi/v3, oldest first."""
        resp = self._send("GET", "/openapi/v3")
        if resp.status_code == 401:
            raise self._auth_error("no token or the token was refused", 401)
        if resp.status_code >= 400:
            raise SlurmError(
                f"GET /openapi/v3: HTTP {resp.status_code}: {resp.text[:200]}", http_status=resp.status_code
            )
        try:
            paths = resp.json().get("paths") or {}
        except (ValueError, AttributeError):
            raise SlurmError("GET /openapi/v3 did not return an OpenAPI document") from None
        found = {m.group(1) for p in paths if (m := re.match(r"^/slurm/(v0\.0\.\d+)/", p))}
        return sorted(found, key=version_number)

    def discover_version(self) -> str:
        offered = self.offered_versions()
        usable = [v for v in offered if v in SUPPORTED_VERSIONS]
        if not usable:
            raise SlurmError(
                f"slurmrestd at {self.base_url} offers {', '.join(offered) or 'no'} API "
                f"versions; this client speaks {', '.join(SUPPORTED_VERSIONS)}",
                permanent=True,
            )
        return usable[-1]

    # ------------------------------------------------------------------ operations
    def ping(self) -> list[PingInfo]:
        body = self._call("GET", "ping")
        self._remember_release(body)
        return [self.wire.parse_ping(p) for p in body.get("pings") or []]

    def diag(self) -> dict[str, Any]:
        """slurmctld statistics (the raw "statistics" object: it differs by version)."""
        return self._call("GET", "diag").get("statistics") or {}

    def submit(self, request: JobRequest) -> SubmitResult:
        body = self._call("POST", "job/submit", json=self.wire.submit_body(request))
        if "job_id" not in body:
            raise SlurmError("slurmrestd accepted the submit but returned no job id")
        notes = [m for _, m in error_list(body)]
        notes += [w.get("description", str(w)) if isinstance(w, dict) else str(w) for w in body.get("warnings") or []]
        return SubmitResult(job_id=str(body["job_id"]), warnings=notes)

    def job(self, job_id: str) -> JobInfo:
        body = self._call("GET", f"job/{job_id}", job_id=str(job_id))
        jobs = body.get("jobs") or []
        if not jobs:
            raise SlurmJobNotFound(str(job_id))
        return self.wire.parse_job(jobs[0])

    def jobs(self, *, update_time: int | None = None) -> list[JobInfo]:
        params = {"update_time": str(update_time)} if update_time else None
        body = self._call("GET", "jobs", params=params)
        return [self.wire.parse_job(j) for j in body.get("jobs") or []]

    def cancel(self, job_id: str) -> None:
        """scancel: the job ends CANCELLED. A job that already ended is not an error."""
        self._delete(job_id, None)

    def signal(self, job_id: str, signal: str = "SIGUSR1") -> None:
        """Send a signal to a running job's processes (the job keeps running if it wants)."""
        if not re.fullmatch(r"SIG[A-Z0-9]+", signal):
            raise ValueError(f"signal: {signal!r} is not a signal name like SIGUSR1")
        self._delete(job_id, signal)

    def _delete(self, job_id: str, signal: str | None) -> None:
        params = {"signal": signal} if signal else None
        try:
            self._call("DELETE", f"job/{job_id}", job_id=str(job_id), params=params)
        except SlurmError as exc:
            if exc.code == ESLURM_ALREADY_DONE and signal is None:
                return
            raise

    def update(self, job_id: str, **fields: Any) -> None:
        """Change a job: hold=, priority=, comment=, time_limit_min=."""
        self._call("POST", f"job/{job_id}", job_id=str(job_id), json=self.wire.update_body(**fields))

    def nodes(self) -> list[NodeInfo]:
        return [self.wire.parse_node(n) for n in self._call("GET", "nodes").get("nodes") or []]

    def partitions(self) -> list[PartitionInfo]:
        return [self.wire.parse_partition(p) for p in self._call("GET", "partitions").get("partitions") or []]

    # ------------------------------------------------------------------ accounting (slurmdbd)
    def accounting_job(self, job_id: str) -> JobInfo:
        """The job's record in slurmdbd, for jobs slurmctld has forgotten (after MinJobAge).
        Only on clusters with accounting; others answer 404 (raised as SlurmError)."""
        body = self._call("GET", f"job/{job_id}", job_id=str(job_id), accounting=True)
        jobs = body.get("jobs") or []
        if not jobs:
            raise SlurmJobNotFound(str(job_id))
        return self.wire.parse_accounting_job(jobs[0])

    def accounting_jobs(self) -> list[JobInfo]:
        body = self._call("GET", "jobs", accounting=True)
        return [self.wire.parse_accounting_job(j) for j in body.get("jobs") or []]

    def accounting_diag(self) -> dict[str, Any]:
        """slurmdbd statistics; needs an administrator (others get error 2002)."""
        return self._call("GET", "diag", accounting=True).get("statistics") or {}

    def _remember_release(self, body: dict[str, Any]) -> None:
        meta = body.get("meta") or {}
        release = (meta.get("Slurm") or meta.get("slurm") or {}).get("release")
        if release:
            self.slurm_release = str(release)
