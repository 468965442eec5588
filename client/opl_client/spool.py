"""The durable spool of a run's metrics and samples: files a training process appends to and the
pusher (opl_client.pusher) drains. The bundled trainer (trainer/reporting.py) and the `opl` SDK
share it.

Every point `{"step", "key", "value", "time"}` is one JSON line of DIR/metrics.jsonl (NaN and
infinities written as the strings "NaN", "Infinity", "-Infinity" so every line is valid JSON).
DIR/metrics.pushed.json holds the byte offset the dashboard acknowledged, so a restarted process
backfills whatever was never acknowledged; DIR/metrics.rejected.jsonl marks the byte ranges of
batches the dashboard refused for good. Rollout samples use DIR/samples.jsonl the same way.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from bisect import bisect_left
from pathlib import Path

SPOOL_NAME = "metrics.jsonl"
OFFSET_NAME = "metrics.pushed.json"
SAMPLES_SPOOL_NAME = "samples.jsonl"
SAMPLES_OFFSET_NAME = "samples.pushed.json"
UPDATES_SPOOL_NAME = "updates.jsonl"
UPDATES_OFFSET_NAME = "updates.pushed.json"


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
        self._keys: dict[str, str] = {}  # key -> its JSON text

    def log(self, step: int, values: dict[str, float], now: float | None = None) -> None:
        """Append one line per value; the text is the same as json.dumps would write, built by hand
        because this runs on the training thread (about 0.5 us a key instead of 3)."""
        now = repr(float(time.time() if now is None else now))
        head = f'{{"step": {int(step)}, "key": '
        keys = self._keys
        parts = []
        for key, v in values.items():
            quoted = keys.get(key)
            if quoted is None:
                quoted = keys[key] = json.dumps(key)
            v = float(v)
            if v - v != 0:  # NaN or an infinity
                value = '"NaN"' if v != v else ('"Infinity"' if v > 0 else '"-Infinity"')
            else:
                value = repr(v)
            parts.append(f'{head}{quoted}, "value": {value}, "time": {now}}}\n')
        with self._lock:
            self._fh.write("".join(parts))
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
