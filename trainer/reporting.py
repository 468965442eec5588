"""Metric reporting: the durable spool, the background push to the dashboard, and heartbeats.

Every point `{"step", "key", "value", "time"}` is appended as one JSON line to DIR/metrics.jsonl
(NaN and infinities written as the strings "NaN", "Infinity", "-Infinity" so every line is valid
JSON). A background thread posts the spool in batches to `{url}/api/v1/runs/{id}/metrics` with
the run's bearer token, body `{"attempt": A, "points": [...]}`, and records the byte offset the
dashboard acknowledged in DIR/metrics.pushed.json, so a restarted trainer backfills whatever was
never acknowledged. Failures are retried with exponential backoff; a 4xx other than 408/429 means
the batch itself is bad, so it is logged and skipped. The same thread posts a heartbeat
`{"attempt", "step", "total_steps"}` every `heartbeat_s`. Nothing here ever blocks training or
raises into it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from pathlib import Path

log = logging.getLogger("trainer.reporting")

SPOOL_NAME = "metrics.jsonl"
OFFSET_NAME = "metrics.pushed.json"
MAX_POINTS_PER_POST = 2000


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
        while not self._stop.wait(min(self.cfg.push_interval_s, 1.0)):
            try:
                self.heartbeat_if_due()
                for _ in range(20):  # a backlog (after downtime) drains in full batches, not one a tick
                    if time.monotonic() < self._next_try or self.push_once():
                        break
            except Exception:  # never let reporting kill the run
                log.exception("metrics pusher step failed")

    def heartbeat_if_due(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_heartbeat < self.cfg.heartbeat_s:
            return
        self._last_heartbeat = now
        body = {"attempt": self.cfg.attempt, "step": int(self.step), "total_steps": int(self.total_steps)}
        try:
            self._client.post(self._heartbeat_url, json=body)
        except Exception as exc:
            log.warning("heartbeat failed: %s", exc)

    def _read_pending(self, offset: int) -> tuple[list[dict], int]:
        path = self.run_dir / SPOOL_NAME
        points, consumed = [], 0
        with open(path, "rb") as fh:
            fh.seek(offset)
            for raw in fh:
                if not raw.endswith(b"\n"):
                    break  # the writer is mid-line
                points.append(json.loads(raw))
                consumed += len(raw)
                if len(points) >= MAX_POINTS_PER_POST:
                    break
        return points, consumed

    def push_once(self) -> bool:
        """Push one batch; True when the spool is fully acknowledged."""
        offset, _ = read_offset(self.run_dir)
        points, consumed = self._read_pending(offset)
        if not points:
            return True
        try:
            resp = self._client.post(self._metrics_url, json={"attempt": self.cfg.attempt, "points": points})
        except Exception as exc:
            self._fail(f"push failed: {exc}")
            return False
        if resp.status_code < 300:
            self._backoff = 0.0
            write_offset(self.run_dir, offset + consumed, self.cfg.attempt)
            return False
        if 400 <= resp.status_code < 500 and resp.status_code not in (408, 429):
            log.error("dashboard refused %d points (HTTP %d: %s); skipping them", len(points), resp.status_code, resp.text[:500])
            write_offset(self.run_dir, offset + consumed, self.cfg.attempt)
            return False
        self._fail(f"push got HTTP {resp.status_code}")
        return False

    def _fail(self, why: str) -> None:
        self._backoff = min(30.0, max(1.0, self._backoff * 2))
        self._next_try = time.monotonic() + self._backoff
        log.warning("%s; retrying in %.0f s", why, self._backoff)

    def close(self) -> None:
        """Stop the thread, then push what is left for at most flush_timeout_s."""
        if not self.enabled:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        deadline = time.monotonic() + self.cfg.flush_timeout_s
        self._backoff = 0.0
        while time.monotonic() < deadline:
            try:
                if self.push_once():
                    break
            except Exception:
                log.exception("final push failed")
                break
            if self._backoff:
                time.sleep(min(self._backoff, max(0.0, deadline - time.monotonic())))
        self.heartbeat_if_due(force=True)
        self._client.close()
