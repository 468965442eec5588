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
or 503 waits the dashboard's Retry-After. A 413 (a body over the dashboard's or a proxy's limit)
halves the stream's byte budget and sends the batch again in halves, at once. Any other 4xx but
408/429 is a permanent refusal (a bad field, an expired token): the batch is counted, logged with
the dashboard's reason, and marked rejected in DIR/metrics.rejected.jsonl (byte ranges of the
spool, whose lines stay as they are), so that `manage.py resend_rejected <run>` can store it once
the dashboard is fixed; the pusher goes on with the next batch. The same thread posts a heartbeat
`{"attempt", "step", "total_steps"}` every `heartbeat_s`. Nothing here ever blocks training or
raises into it: the training thread only appends to the spool file; `close` waits at most
`flush_timeout_s`.

Rollout samples (trainer/samples.py) travel the same way: DIR/samples.jsonl, acknowledged offset in
DIR/samples.pushed.json, posted by the same thread to `{url}/api/v1/runs/{id}/samples` with body
`{"attempt": A, "samples": [...]}` in batches of at most MAX_SAMPLES_PER_POST lines (and about
MAX_SAMPLE_BYTES_PER_POST bytes), with their own backoff and DIR/samples.rejected.jsonl. Failed and
refused pushes are counted per stream (`Pusher.failure_counts`, logged by the trainer as
metrics/push_failures and samples/push_failures).
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
from bisect import bisect_left
from pathlib import Path

log = logging.getLogger("trainer.reporting")

SPOOL_NAME = "metrics.jsonl"
OFFSET_NAME = "metrics.pushed.json"
SAMPLES_SPOOL_NAME = "samples.jsonl"
SAMPLES_OFFSET_NAME = "samples.pushed.json"
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
    """Drop points (and rollout samples) after `keep_through_step`: they will be produced again after
    a resume.

    Points at the checkpoint's own step are pushed again under the new attempt, because the
    dashboard supersedes an older attempt's points from the resume step on. Samples follow the same
    rule (a repost of a sample is idempotent on the dashboard).
    """
    _truncate(run_dir, SPOOL_NAME, OFFSET_NAME, keep_through_step, attempt)
    _truncate(run_dir, SAMPLES_SPOOL_NAME, SAMPLES_OFFSET_NAME, keep_through_step, attempt)


def _truncate(run_dir: Path, spool_name: str, offset_name: str, keep_through_step: int, attempt: int) -> None:
    path = Path(run_dir) / spool_name
    if not path.exists():
        if (Path(run_dir) / offset_name).exists():  # an offset into a spool that is gone: start over
            write_offset(run_dir, 0, attempt, offset_name)
        write_rejected(run_dir, spool_name, [])
        return
    kept: list[str] = []
    moved: list[tuple[int, int, int]] = []  # (old start, old end, new start) of each kept line
    first_at_resume_step: int | None = None
    size = old = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break  # a torn last line from a killed process
            length = len(line.encode("utf-8"))
            old += length
            step = json.loads(line)["step"]
            if step > keep_through_step:
                continue
            if step == keep_through_step and first_at_resume_step is None:
                first_at_resume_step = size
            kept.append(line)
            moved.append((old - length, old, size))
            size += length
    atomic_write_text(path, "".join(kept))
    if records := read_rejected(run_dir, spool_name):
        write_rejected(run_dir, spool_name, _moved_rejected(records, moved))
    offset, old_attempt = read_offset(run_dir, offset_name)
    offset = min(offset, size)
    if old_attempt != attempt and first_at_resume_step is not None:
        offset = min(offset, first_at_resume_step)
    write_offset(run_dir, offset, attempt, offset_name)


def read_offset(run_dir: Path, name: str = OFFSET_NAME) -> tuple[int, int | None]:
    try:
        data = json.loads((Path(run_dir) / name).read_text())
        return int(data["offset"]), data.get("attempt")
    except (FileNotFoundError, ValueError, KeyError):
        return 0, None


def write_offset(run_dir: Path, offset: int, attempt: int, name: str = OFFSET_NAME) -> None:
    atomic_write_text(Path(run_dir) / name, json.dumps({"offset": offset, "attempt": attempt}))


# --- batches the dashboard refused: their spool lines stay, marked by byte range -----------------


def rejected_name(spool_name: str) -> str:
    """metrics.jsonl -> metrics.rejected.jsonl: one JSON record per refused batch."""
    return spool_name.removesuffix(".jsonl") + ".rejected.jsonl"


def mark_rejected(run_dir: Path, spool_name: str, record: dict) -> None:
    """Append a refused batch's record: {"start", "end"} (its byte range in the spool), "lines",
    "attempt", "status", "reason", "time"."""
    with open(Path(run_dir) / rejected_name(spool_name), "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_rejected(run_dir: Path, spool_name: str) -> list[dict]:
    try:
        text = (Path(run_dir) / rejected_name(spool_name)).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]  # not a torn last line


def write_rejected(run_dir: Path, spool_name: str, records: list[dict]) -> None:
    """Replace the records (after a resend stored some, or a resume moved the spool's lines)."""
    path = Path(run_dir) / rejected_name(spool_name)
    if records:
        atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in records))
    else:
        path.unlink(missing_ok=True)


def rejected_lines(run_dir: Path, spool_name: str, record: dict) -> list[bytes]:
    """The spool lines of a refused batch, as they were sent."""
    with open(Path(run_dir) / spool_name, "rb") as fh:
        fh.seek(record["start"])
        return fh.read(record["end"] - record["start"]).splitlines()


def batch_body(attempt: int, key: str, lines: list[bytes]) -> bytes:
    """The JSON batch of spool lines, built from the lines as they are: {"attempt": A, key: [...]}."""
    return b'{"attempt":%d,"%s":[' % (int(attempt), key.encode()) + b",".join(lines) + b"]}"


def _moved_rejected(records: list[dict], kept: list[tuple[int, int, int]]) -> list[dict]:
    """The records after a truncation that kept the lines `kept` [(old start, old end, new start)],
    in order: each range shrinks to its kept lines; a range with none left goes (a resumed attempt
    writes those steps again)."""
    starts = [k[0] for k in kept]
    out = []
    for record in records:
        first, last = bisect_left(starts, record["start"]), bisect_left(starts, record["end"])
        inside = [k for k in kept[first:last] if k[1] <= record["end"]]
        if inside:
            out.append(
                {
                    **record,
                    "start": inside[0][2],
                    "end": inside[-1][2] + inside[-1][1] - inside[-1][0],
                    "lines": len(inside),
                }
            )
    return out


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
        self.failures = 0  # pushes that failed or were refused
        self.logged_failures = 0  # the count the trainer last logged as <noun>/push_failures
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
        self._streams = (self._metrics, self._samples)
        if self.enabled:
            import httpx  # only where a dashboard is configured

            self._heartbeat_url = f"{runs}/heartbeat"
            headers = {"Authorization": f"Bearer {reporting.token or ''}"}
            self._client = httpx.Client(headers=headers, timeout=10.0)

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

    def failure_counts(self) -> dict[str, float]:
        """{"metrics/push_failures": n, "samples/push_failures": n} for each count that changed since
        the last call: the trainer logs them with the step's metrics, so they reach the run page and
        the trainer's own metrics.jsonl even when every push fails."""
        changed = {}
        for stream in self._streams:
            if stream.failures != stream.logged_failures:
                stream.logged_failures = stream.failures
                changed[f"{stream.noun}/push_failures"] = float(stream.failures)
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
        body = batch_body(self.cfg.attempt, stream.key, lines)
        headers = {"Content-Type": "application/json"}
        if len(body) > COMPRESS_ABOVE_BYTES:
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
        if 400 <= resp.status_code < 500 and resp.status_code not in (408, 429):
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
        stream.rejected_lines += count
        reason = resp.text[:500]
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
            stream.key,
            resp.status_code,
            reason,
            stream.spool_name,
            rejected_name(stream.spool_name),
            stream.rejected_lines,
            stream.key,
            self.cfg.run_id,
        )
        self._acknowledge(stream, offset + consumed)

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
                    stream.key,
                    rejected_name(stream.spool_name),
                )


def retry_after(header: str | None) -> float | None:
    """Seconds from a Retry-After header in seconds (an HTTP date is not used), within bounds."""
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(header))) if header else None
    except ValueError:
        return None
