"""The background push of a run's spools to the dashboard, and its heartbeats; shared by the
bundled trainer (trainer/reporting.py) and the `opl` SDK.

A thread posts DIR/metrics.jsonl in batches to `{url}/api/v1/runs/{id}/metrics` with the run's
bearer token, body `{"attempt": A, "points": [...]}` (gzip-compressed), and records the byte offset
the dashboard acknowledged in DIR/metrics.pushed.json, so a restarted process backfills whatever
was never acknowledged.

Batching: a push goes out every `push_interval_s`, or as soon as about MAX_POINTS_PER_POST points
are waiting; a backlog drains in full batches. The body is built from the spool's lines as they
are (no parsing) and compressed by zlib, which releases the GIL: the thread takes little from
the training thread. Failures back off exponentially (1 s doubling to 30 s, with jitter); a 429
or 503 waits the dashboard's Retry-After. A 413 (a body over the dashboard's or a proxy's limit)
halves the stream's byte budget and sends the batch again in halves, at once. Any other 4xx but
408/429 is a permanent refusal (a bad field, an expired token): the batch is counted, logged with
the dashboard's reason, and marked rejected in DIR/metrics.rejected.jsonl (byte ranges of the
spool, whose lines stay as they are), so that `manage.py resend_rejected <run>` can store it once
the dashboard is fixed; the pusher goes on with the next batch. A batch the dashboard stored but
for some points (202 with `"refused": [{"index", "key", "step", "reason"}]`) is acknowledged; each
refused point is counted and the first few are logged with their key, step and reason. The same thread posts a heartbeat
`{"attempt", "step", "total_steps"}` every `heartbeat_s`. Nothing here ever blocks training or
raises into it: the training thread only appends to the spool file; `close` waits at most
`flush_timeout_s`.

Run updates (the SDK's config changes, summaries, metric definitions, alerts, histograms and
tables) travel the same way too: DIR/updates.jsonl, one JSON body a line, each posted as it is to
`{url}/api/v1/runs/{id}/updates`, in order, acknowledged in DIR/updates.pushed.json.

Rollout samples travel the same way: DIR/samples.jsonl, acknowledged offset in
DIR/samples.pushed.json, posted by the same thread to `{url}/api/v1/runs/{id}/samples` with body
`{"attempt": A, "samples": [...]}` in batches of at most MAX_SAMPLES_PER_POST lines (and about
MAX_SAMPLE_BYTES_PER_POST bytes), with their own backoff and DIR/samples.rejected.jsonl. Failed and
refused pushes are counted per stream (`Pusher.failure_counts`, logged by the trainer as
metrics/push_failures and samples/push_failures): those count only points and samples that in
the end were not stored (refused for good), never a push that a retry delivered.

`reporting` is any object with the fields dashboard_url, run_id, token, attempt, push_interval_s,
heartbeat_s and flush_timeout_s (the trainer's ReportingConfig, the SDK's PushSettings).
HTTP is the client's one HTTP client (opl_client.http: the standard library, one kept-alive connection).
"""

from __future__ import annotations

import gzip
import json
import logging
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from opl_client.http import HttpClient
from opl_client.spool import (
    OFFSET_NAME,
    SAMPLES_OFFSET_NAME,
    SAMPLES_SPOOL_NAME,
    SPOOL_NAME,
    UPDATES_OFFSET_NAME,
    UPDATES_SPOOL_NAME,
    batch_body,
    mark_rejected,
    read_offset,
    rejected_name,
    write_offset,
)

log = logging.getLogger("opl.pusher")

MAX_POINTS_PER_POST = 5000
MAX_SAMPLES_PER_POST = 64
# A sample line is up to ~100 KB (4,096 tokens with their log-ratios): a post stays a few MB.
MAX_SAMPLE_BYTES_PER_POST = 4 << 20
# Push before the interval once this many spool bytes wait (a spool line is ~80-100 bytes).
PUSH_EARLY_BYTES = MAX_POINTS_PER_POST * 80
TICK_S = 0.2  # how often the thread looks at the spool's size
COMPRESS_ABOVE_BYTES = 1024
MAX_BACKOFF_S = 30.0
MAX_RETRY_AFTER_S = 120.0
MAX_LOGGED_REFUSALS = 20  # refused points logged one by one; the rest only counted
MAX_KEPT_REFUSALS = 10_000  # refused points kept with their reason for `opl import` to report


class _Stream:
    """One spool the pusher drains: the file, the acknowledged offset, the endpoint, retry state."""

    def __init__(
        self,
        noun: str,
        spool_name: str,
        offset_name: str,
        url: str,
        key: str,
        max_lines: int,
        max_bytes: int | None,
        early_bytes: int,
    ):
        self.noun, self.spool_name, self.offset_name = noun, spool_name, offset_name
        self.url, self.key, self.max_lines, self.max_bytes, self.early_bytes = (
            url,
            key,
            max_lines,
            max_bytes,
            early_bytes,
        )
        self.backoff = 0.0
        self.next_try = 0.0
        self.last_push = time.monotonic()  # the first push goes out one interval after the start
        self.offset: int | None = None  # the acknowledged spool offset, read once
        self.retry: tuple | None = None  # (offset, consumed, count, body, headers) of a refused push
        self.failures = 0  # pushes that failed or were refused (a retry may still deliver them)
        self.lost = 0  # lines the dashboard refused for good: what <noun>/push_failures counts
        self.logged_failures = 0  # the count the trainer last logged as <noun>/push_failures
        self.logged_refusals = 0  # refused points whose key, step and reason were logged
        self.refused: list[tuple[str, int, str]] = []  # (key, step, reason) of lost points, the first MAX_KEPT
        self.rejected_lines = 0  # lines of batches the dashboard refused for good (kept, marked rejected)
        self.byte_cap: int | None = None  # learned from a 413: at most this many spool bytes a post


class Pusher:
    """Background thread: pushes the spools and sends heartbeats. Inert without a dashboard URL."""

    def __init__(self, run_dir: Path, reporting, total_steps: int):
        self.run_dir = Path(run_dir)
        self.cfg = reporting
        self.total_steps = total_steps
        self.step = 0
        self.enabled = bool(reporting.dashboard_url and reporting.run_id)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_heartbeat = 0.0
        base = (reporting.dashboard_url or "").rstrip("/")
        runs = f"{base}/api/v1/runs/{reporting.run_id}"
        self._metrics = _Stream(
            "metrics", SPOOL_NAME, OFFSET_NAME, f"{runs}/metrics", "points", MAX_POINTS_PER_POST, None, PUSH_EARLY_BYTES
        )
        self._samples = _Stream(
            "samples",
            SAMPLES_SPOOL_NAME,
            SAMPLES_OFFSET_NAME,
            f"{runs}/samples",
            "samples",
            MAX_SAMPLES_PER_POST,
            MAX_SAMPLE_BYTES_PER_POST,
            MAX_SAMPLE_BYTES_PER_POST,
        )
        self._updates = _Stream("updates", UPDATES_SPOOL_NAME, UPDATES_OFFSET_NAME, f"{runs}/updates", "", 1, None, 1)
        self._streams = (self._metrics, self._samples, self._updates)
        if self.enabled:
            self._heartbeat_url = f"{runs}/heartbeat"
            self._client = HttpClient({"Authorization": f"Bearer {reporting.token or ''}"}, timeout=10.0)

    # the metrics stream's retry state, as the tests and benchmarks look at it
    @property
    def _backoff(self) -> float:
        return self._metrics.backoff

    @property
    def _next_try(self) -> float:
        return self._metrics.next_try

    @property
    def sample_push_failures(self) -> int:
        """Sample pushes that failed or were refused so far (each is retried from the spool, except a
        batch the dashboard refuses for good, which is marked rejected for a resend)."""
        return self._samples.failures

    @property
    def metric_push_failures(self) -> int:
        return self._metrics.failures

    @property
    def lost_points(self) -> int:
        """Metric points the dashboard refused for good (whole batches or single points)."""
        return self._metrics.lost

    @property
    def lost_samples(self) -> int:
        return self._samples.lost

    @property
    def refused_points(self) -> list[tuple[str, int, str]]:
        """(key, step, reason) of the metric points the dashboard refused for good (the first 10,000)."""
        return list(self._metrics.refused)

    def failure_counts(self) -> dict[str, float]:
        """{"metrics/push_failures": n, "samples/push_failures": n}, the points and samples that were
        refused for good so far, for each count that changed since the last call: the trainer logs
        them with the step's metrics, so they reach the run page and the trainer's own metrics.jsonl.
        A push that failed and was delivered by a retry is no failure here."""
        changed = {}
        for stream in self._streams[:2]:
            if stream.lost != stream.logged_failures:
                stream.logged_failures = stream.lost
                changed[f"{stream.noun}/push_failures"] = float(stream.lost)
        return changed

    def start(self) -> None:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="metrics-pusher", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(min(TICK_S, self.cfg.push_interval_s)):
            try:
                self.heartbeat_if_due()
                for stream in self._streams:
                    if self._due(stream):
                        stream.last_push = time.monotonic()
                        for _ in range(20):  # a backlog (after downtime) drains in full batches, not one a tick
                            if time.monotonic() < stream.next_try or self._push(stream):
                                break
            except Exception:  # never let reporting kill the run
                log.exception("metrics pusher step failed")

    def _due(self, stream: _Stream) -> bool:
        """A push is due when lines wait and the interval has passed, or many lines wait."""
        if time.monotonic() < stream.next_try:
            return False
        waiting = self._pending(stream)
        if waiting <= 0:
            return False
        return waiting >= stream.early_bytes or time.monotonic() - stream.last_push >= self.cfg.push_interval_s

    def _pending(self, stream: _Stream) -> int:
        try:
            size = (self.run_dir / stream.spool_name).stat().st_size
        except FileNotFoundError:
            return 0
        return size - self._acknowledged(stream)

    def _acknowledged(self, stream: _Stream) -> int:
        if stream.offset is None:
            stream.offset = read_offset(self.run_dir, stream.offset_name)[0]
        return stream.offset

    def _acknowledge(self, stream: _Stream, offset: int) -> None:
        write_offset(self.run_dir, offset, self.cfg.attempt, stream.offset_name)
        stream.offset = offset

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

    def _read_pending(self, stream: _Stream, offset: int) -> tuple[list[bytes], int]:
        """Whole spool lines after `offset`, unparsed: up to the stream's line count and (past the
        first line) its byte budget."""
        lines, consumed = [], 0
        budget = (
            min(b for b in (stream.max_bytes, stream.byte_cap) if b is not None)
            if stream.max_bytes is not None or stream.byte_cap is not None
            else None
        )
        try:
            fh = open(self.run_dir / stream.spool_name, "rb")
        except FileNotFoundError:
            return lines, consumed
        with fh:
            fh.seek(offset)
            for raw in fh:
                if not raw.endswith(b"\n"):
                    break  # the writer is mid-line
                if lines and budget is not None and consumed + len(raw) > budget:
                    break
                lines.append(raw[:-1])
                consumed += len(raw)
                if len(lines) >= stream.max_lines:
                    break
        return lines, consumed

    def _body(self, stream: _Stream, lines: list[bytes]) -> tuple[bytes, dict[str, str]]:
        """The batch as JSON built from the spool's own lines, gzip-compressed when worth it."""
        # an update is posted as its own line; metrics and samples as a batch of lines
        body = batch_body(self.cfg.attempt, stream.key, lines) if stream.key else lines[0]
        headers = {"Content-Type": "application/json"}
        if len(body) > COMPRESS_ABOVE_BYTES and stream.key:  # the updates endpoint takes plain JSON
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        return body, headers

    def push_once(self, timeout: float | None = None) -> bool:
        """Push one batch of metric points; True when the metrics spool is fully acknowledged."""
        return self._push(self._metrics, timeout)

    def push_samples_once(self, timeout: float | None = None) -> bool:
        """Push one batch of rollout samples; True when the samples spool is fully acknowledged."""
        return self._push(self._samples, timeout)

    def _push(self, stream: _Stream, timeout: float | None = None) -> bool:
        offset = self._acknowledged(stream)
        if stream.retry is not None and stream.retry[0] == offset:  # the batch a 429/503 sent back: as built
            _, consumed, count, body, headers = stream.retry
        else:
            lines, consumed = self._read_pending(stream, offset)
            if not lines:
                return True
            count, (body, headers) = len(lines), self._body(stream, lines)
        stream.retry = None
        try:
            resp = self._client.post(
                stream.url, content=body, headers=headers, **({} if timeout is None else {"timeout": timeout})
            )
        except Exception as exc:
            stream.retry = (offset, consumed, count, body, headers)
            self._fail(stream, f"{stream.noun} push failed: {exc}")
            return False
        if resp.status_code < 300:
            stream.backoff = 0.0
            self._count_refused(stream, resp)
            self._acknowledge(stream, offset + consumed)
            return False
        if resp.status_code == 413 and count > 1:  # too large for the dashboard or a proxy: halves, at once
            stream.byte_cap = max(1, consumed // 2)
            log.warning(
                "dashboard refused %d %s in %d bytes as too large (HTTP 413: %s); sending at most %d spool "
                "bytes a post from now on",
                count,
                stream.key,
                len(body),
                resp.text[:300],
                stream.byte_cap,
            )
            return False
        # 407 is the environment's proxy asking for its credentials, not the dashboard refusing
        # the batch: kept for a retry (with a warning that says so), like a timeout or a 429
        if 400 <= resp.status_code < 500 and resp.status_code not in (407, 408, 429):
            self._reject(stream, offset, consumed, count, resp)
            return False
        stream.retry = (offset, consumed, count, body, headers)
        self._fail(
            stream, f"{stream.noun} push got HTTP {resp.status_code}", retry_after(resp.headers.get("Retry-After"))
        )
        return False

    def _reject(self, stream: _Stream, offset: int, consumed: int, count: int, resp) -> None:
        """A batch refused for good: counted, logged with the reason, its lines marked rejected in
        the spool's ledger for a resend, and passed over so that the rest still reaches the run."""
        stream.failures += 1
        stream.lost += count
        stream.rejected_lines += count
        reason = resp.text[:500]
        self._keep_refused(stream, offset, consumed, resp)
        mark_rejected(
            self.run_dir,
            stream.spool_name,
            {
                "start": offset,
                "end": offset + consumed,
                "lines": count,
                "attempt": int(self.cfg.attempt),
                "status": resp.status_code,
                "reason": reason,
                "time": time.time(),
            },
        )
        log.error(
            "dashboard refused %d %s for good (HTTP %d: %s); they stay in %s, marked rejected in %s (%d %s "
            "so far): once the dashboard is fixed, `python manage.py resend_rejected %s` stores them",
            count,
            stream.key or stream.noun,
            resp.status_code,
            reason,
            stream.spool_name,
            rejected_name(stream.spool_name),
            stream.rejected_lines,
            stream.key or stream.noun,
            self.cfg.run_id,
        )
        self._acknowledge(stream, offset + consumed)

    def _keep_refused(self, stream: _Stream, offset: int, consumed: int, resp) -> None:
        """(key, step, reason) of each point of a batch refused as a whole, for `opl import` to report;
        the reason is the dashboard's own for that point where it names one."""
        room = MAX_KEPT_REFUSALS - len(stream.refused)
        if room <= 0:
            return
        try:
            answer = resp.json()
        except ValueError:
            answer = None
        errors, overall = {}, f"HTTP {resp.status_code}: {resp.text[:300]}"
        if isinstance(answer, dict):
            overall = f"HTTP {resp.status_code}: {answer.get('error') or answer.get('detail') or resp.text[:300]}"
            for error in answer.get("errors") or []:
                if isinstance(error, dict) and isinstance(error.get("index"), int):
                    errors[error["index"]] = f"{error.get('field', '')}: {error.get('message', '')}".strip(": ")
        try:
            with open(self.run_dir / stream.spool_name, "rb") as fh:
                fh.seek(offset)
                lines = fh.read(consumed).splitlines()[:room]
            for index, line in enumerate(lines):
                point = json.loads(line)
                reason = f"{overall} ({errors[index]})" if index in errors else overall
                stream.refused.append((point.get("key", stream.noun), point.get("step"), reason))
        except (OSError, ValueError):
            pass

    def _count_refused(self, stream: _Stream, resp) -> None:
        """A stored batch's points the dashboard refused one by one (a key with a control character,
        a step out of range): counted as lost, the first few logged with key, step and reason."""
        if resp.status_code != 202:
            return
        try:
            refused = resp.json().get("refused") or []
        except (ValueError, AttributeError):
            return
        stream.lost += len(refused)
        room = MAX_KEPT_REFUSALS - len(stream.refused)
        stream.refused.extend((p.get("key"), p.get("step"), str(p.get("reason"))) for p in refused[: max(0, room)])
        for point in refused[: max(0, MAX_LOGGED_REFUSALS - stream.logged_refusals)]:
            stream.logged_refusals += 1
            log.error(
                "dashboard refused %s %r at step %s: %s",
                stream.noun.rstrip("s"),
                point.get("key"),
                point.get("step"),
                point.get("reason"),
            )
        if refused:
            log.debug("%d %s refused in one batch", len(refused), stream.key)

    def _fail(self, stream: _Stream, why: str, wait_s: float | None = None) -> None:
        stream.failures += 1
        stream.backoff = min(MAX_BACKOFF_S, max(1.0, stream.backoff * 2))
        delay = wait_s if wait_s is not None else stream.backoff
        delay *= 1 + random.uniform(0, 0.2)  # ranks that failed together retry apart
        stream.next_try = time.monotonic() + delay
        log.warning("%s; retrying in %.1f s", why, delay)

    def close(self) -> None:
        """Stop the thread, then push what is left; returns within about flush_timeout_s even when
        the dashboard hangs (what is left stays in the spools for a restarted trainer)."""
        if not self.enabled:
            return
        deadline = time.monotonic() + self.cfg.flush_timeout_s
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(0.2, deadline - time.monotonic()))
            if self._thread.is_alive():  # stuck in a request to a hanging dashboard
                log.warning("metrics push still waiting on the dashboard at exit; the spool keeps the rest")
                return
        for stream in self._streams:
            stream.backoff = 0.0
            stream.next_try = 0.0
        pending = list(self._streams)
        while pending and deadline - time.monotonic() > 0:
            for stream in list(pending):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if time.monotonic() < stream.next_try:
                    continue
                try:
                    if self._push(stream, timeout=left):
                        pending.remove(stream)
                except Exception:
                    log.exception("final %s push failed", stream.noun)
                    pending.remove(stream)
            if pending:
                wait = min(s.next_try for s in pending) - time.monotonic()
                if wait > 0:
                    time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
        self.heartbeat_if_due(force=True, timeout=max(0.5, min(5.0, deadline - time.monotonic())))
        self._client.close()
        for stream in self._streams:
            if stream.rejected_lines:
                log.error(
                    "%d %s of this run were refused by the dashboard for good; they are kept, marked in %s",
                    stream.rejected_lines,
                    stream.key or stream.noun,
                    rejected_name(stream.spool_name),
                )


def retry_after(header: str | None) -> float | None:
    """Seconds from a Retry-After header in seconds (an HTTP date is not used), within bounds."""
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(header))) if header else None
    except ValueError:
        return None


@dataclass
class PushSettings:
    """The pusher's settings for a process that is not the bundled trainer (the SDK, `opl sync`)."""

    dashboard_url: str | None
    run_id: str | None
    token: str | None
    attempt: int = 1
    push_interval_s: float = 2.0
    heartbeat_s: float = 30.0
    flush_timeout_s: float = 30.0
