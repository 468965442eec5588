"""Metric reporting: the durable spool, the background push to the dashboard, and heartbeats.

Every point `{"step", "key", "value", "time"}` is appended as one JSON line to DIR/metrics.jsonl
(NaN and infinities written as the strings "NaN", "Infinity", "-Infinity" so every line is valid
JSON). A background thread posts the spool in batches to `{url}/api/v1/runs/{id}/metrics` with
the run's bearer token, body `{"attempt": A, "points": [...]}` (gzip-compressed), and records the
byte offset the dashboard acknowledged in DIR/metrics.pushed.json, so a restarted trainer
backfills whatever was never acknowledged.

Batching: a push goes out every `push_interval_s`, or as soon as about MAX_POINTS_PER_POST points
are waiting; a backlog drains in full batches. The body is built from the spool's lines as they
are (no parsing) and compressed by zlib, which releases the GIL: the thread takes little from
the training thread. Failures back off exponentially (1 s doubling to 30 s, with jitter); a 429
or 503 waits the dashboard's Retry-After. A 4xx other than 408/429 means the batch itself is
bad, so it is logged and skipped. The same thread posts a heartbeat `{"attempt", "step",
"total_steps"}` every `heartbeat_s`. Nothing here ever blocks training or raises into it: the
training thread only appends to the spool file; `close` waits at most `flush_timeout_s`.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import os
import random
import threading
import time
from pathlib import Path

log = logging.getLogger("trainer.reporting")

SPOOL_NAME = "metrics.jsonl"
OFFSET_NAME = "metrics.pushed.json"
MAX_POINTS_PER_POST = 5000
# Push before the interval once this many spool bytes wait (a spool line is ~80-100 bytes).
PUSH_EARLY_BYTES = MAX_POINTS_PER_POST * 80
TICK_S = 0.2  # how often the thread looks at the spool's size
COMPRESS_ABOVE_BYTES = 1024
MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 120.0


def json_number(value: float):
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class MetricSpool:
    """Append-only metrics.jsonl; the durable record of a run's metrics."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / SPOOL_NAME
        self._fh = open(self.path, "a", encoding="utf-8")
        self._lock = threading.Lock()

    def log(self, step: int, values: dict[str, float], now: float | None = None) -> None:
        now = time.time() if now is None else now
        lines = "".join(
            json.dumps({"step": int(step), "key": key, "value": json_number(v), "time": now}) + "\n"
            for key, v in values.items()
        )
        with self._lock:
            self._fh.write(lines)
            self._fh.flush()

    def sync(self) -> None:
        with self._lock:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.flush()
                self._fh.close()


def truncate_spool(run_dir: Path, keep_through_step: int, attempt: int) -> None:
    """Drop points after `keep_through_step` (they will be produced again after a resume).

    Points at the checkpoint's own step are pushed again under the new attempt, because the
    dashboard supersedes an older attempt's points from the resume step on.
    """
    path = Path(run_dir) / SPOOL_NAME
    if not path.exists():
        return
    kept: list[str] = []
    first_at_resume_step: int | None = None
    size = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break  # a torn last line from a killed process
            step = json.loads(line)["step"]
            if step > keep_through_step:
                continue
            if step == keep_through_step and first_at_resume_step is None:
                first_at_resume_step = size
            kept.append(line)
            size += len(line.encode("utf-8"))
    atomic_write_text(path, "".join(kept))
    offset, old_attempt = read_offset(run_dir)
    offset = min(offset, size)
    if old_attempt != attempt and first_at_resume_step is not None:
        offset = min(offset, first_at_resume_step)
    write_offset(run_dir, offset, attempt)


def read_offset(run_dir: Path) -> tuple[int, int | None]:
    try:
        data = json.loads((Path(run_dir) / OFFSET_NAME).read_text())
        return int(data["offset"]), data.get("attempt")
    except (FileNotFoundError, ValueError, KeyError):
        return 0, None


def write_offset(run_dir: Path, offset: int, attempt: int) -> None:
    atomic_write_text(Path(run_dir) / OFFSET_NAME, json.dumps({"offset": offset, "attempt": attempt}))


class Pusher:
    """Background thread: pushes the spool and sends heartbeats. Inert without a dashboard URL."""

    def __init__(self, run_dir: Path, reporting, total_steps: int):
        self.run_dir = Path(run_dir)
        self.cfg = reporting
        self.total_steps = total_steps
        self.step = 0
        self.enabled = bool(reporting.dashboard_url and reporting.run_id)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff = 0.0
        self._next_try = 0.0
        self._last_heartbeat = 0.0
        self._last_push = time.monotonic()  # the first push goes out one interval after the start
        self._offset: int | None = None  # the acknowledged spool offset, read once
        self._retry: tuple | None = None  # (offset, consumed, points, body, headers) of a refused push
        if self.enabled:
            import httpx  # only where a dashboard is configured

            base = reporting.dashboard_url.rstrip("/")
            self._metrics_url = f"{base}/api/v1/runs/{reporting.run_id}/metrics"
            self._heartbeat_url = f"{base}/api/v1/runs/{reporting.run_id}/heartbeat"
            headers = {"Authorization": f"Bearer {reporting.token or ''}"}
            self._client = httpx.Client(headers=headers, timeout=10.0)

    def start(self) -> None:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="metrics-pusher", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(min(TICK_S, self.cfg.push_interval_s)):
            try:
                self.heartbeat_if_due()
                if self._due():
                    self._last_push = time.monotonic()
                    for _ in range(20):  # a backlog (after downtime) drains in full batches, not one a tick
                        if time.monotonic() < self._next_try or self.push_once():
                            break
            except Exception:  # never let reporting kill the run
                log.exception("metrics pusher step failed")

    def _due(self) -> bool:
        """A push is due when points wait and the interval has passed, or many points wait."""
        if time.monotonic() < self._next_try:
            return False
        waiting = self.pending_bytes()
        if waiting <= 0:
            return False
        return waiting >= PUSH_EARLY_BYTES or time.monotonic() - self._last_push >= self.cfg.push_interval_s

    def pending_bytes(self) -> int:
        try:
            size = (self.run_dir / SPOOL_NAME).stat().st_size
        except FileNotFoundError:
            return 0
        return size - self._acknowledged()

    def _acknowledged(self) -> int:
        if self._offset is None:
            self._offset = read_offset(self.run_dir)[0]
        return self._offset

    def _acknowledge(self, offset: int) -> None:
        write_offset(self.run_dir, offset, self.cfg.attempt)
        self._offset = offset

    def heartbeat_if_due(self, force: bool = False, timeout: float | None = None) -> None:
        now = time.monotonic()
        if not force and now - self._last_heartbeat < self.cfg.heartbeat_s:
            return
        self._last_heartbeat = now
        body = {"attempt": self.cfg.attempt, "step": int(self.step), "total_steps": int(self.total_steps)}
        try:
            self._client.post(self._heartbeat_url, json=body, **({} if timeout is None else {"timeout": timeout}))
        except Exception as exc:
            log.warning("heartbeat failed: %s", exc)

    def _read_pending(self, offset: int) -> tuple[list[bytes], int]:
        """Up to MAX_POINTS_PER_POST whole spool lines after `offset`, unparsed."""
        path = self.run_dir / SPOOL_NAME
        lines, consumed = [], 0
        with open(path, "rb") as fh:
            fh.seek(offset)
            for raw in fh:
                if not raw.endswith(b"\n"):
                    break  # the writer is mid-line
                lines.append(raw[:-1])
                consumed += len(raw)
                if len(lines) >= MAX_POINTS_PER_POST:
                    break
        return lines, consumed

    def _body(self, lines: list[bytes]) -> tuple[bytes, dict[str, str]]:
        """The batch as JSON built from the spool's own lines, gzip-compressed when worth it."""
        body = b'{"attempt":%d,"points":[' % int(self.cfg.attempt) + b",".join(lines) + b"]}"
        headers = {"Content-Type": "application/json"}
        if len(body) > COMPRESS_ABOVE_BYTES:
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        return body, headers

    def push_once(self, timeout: float | None = None) -> bool:
        """Push one batch; True when the spool is fully acknowledged."""
        offset = self._acknowledged()
        if self._retry is not None and self._retry[0] == offset:  # the batch a 429/503 sent back: as built
            _, consumed, count, body, headers = self._retry
        else:
            lines, consumed = self._read_pending(offset)
            if not lines:
                return True
            count, (body, headers) = len(lines), self._body(lines)
        self._retry = None
        try:
            resp = self._client.post(self._metrics_url, content=body, headers=headers,
                                     **({} if timeout is None else {"timeout": timeout}))
        except Exception as exc:
            self._retry = (offset, consumed, count, body, headers)
            self._fail(f"push failed: {exc}")
            return False
        if resp.status_code < 300:
            self._backoff = 0.0
            self._acknowledge(offset + consumed)
            return False
        if 400 <= resp.status_code < 500 and resp.status_code not in (408, 429):
            log.error("dashboard refused %d points (HTTP %d: %s); skipping them", count, resp.status_code, resp.text[:500])
            self._acknowledge(offset + consumed)
            return False
        self._retry = (offset, consumed, count, body, headers)
        self._fail(f"push got HTTP {resp.status_code}", retry_after(resp.headers.get("Retry-After")))
        return False

    def _fail(self, why: str, wait_s: float | None = None) -> None:
        self._backoff = min(MAX_BACKOFF_S, max(1.0, self._backoff * 2))
        delay = wait_s if wait_s is not None else self._backoff
        delay *= 1 + random.uniform(0, 0.2)  # ranks that failed together retry apart
        self._next_try = time.monotonic() + delay
        log.warning("%s; retrying in %.1f s", why, delay)

    def close(self) -> None:
        """Stop the thread, then push what is left; returns within about flush_timeout_s even when
        the dashboard hangs (what is left stays in the spool for a restarted trainer)."""
        if not self.enabled:
            return
        deadline = time.monotonic() + self.cfg.flush_timeout_s
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(0.2, deadline - time.monotonic()))
            if self._thread.is_alive():  # stuck in a request to a hanging dashboard
                log.warning("metrics push still waiting on the dashboard at exit; the spool keeps the rest")
                return
        self._backoff = 0.0
        self._next_try = 0.0
        while (left := deadline - time.monotonic()) > 0:
            try:
                if self.push_once(timeout=left):
                    break
            except Exception:
                log.exception("final push failed")
                break
            wait = self._next_try - time.monotonic()
            if wait > 0:
                time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
        self.heartbeat_if_due(force=True, timeout=max(0.5, min(5.0, deadline - time.monotonic())))
        self._client.close()


def retry_after(header: str | None) -> float | None:
    """Seconds from a Retry-After header in seconds (an HTTP date is not used), within bounds."""
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(header))) if header else None
    except ValueError:
        return None
