"""Storing again what a run's trainer marked rejected: batches the dashboard refused for good (a
bad field, an expired token), whose lines stay in the run folder's spool with their byte ranges in
<spool>.rejected.jsonl (trainer/reporting.py). Once the dashboard is fixed, `manage.py
resend_rejected <run>` hands each batch to the same checks and services as the ingestion API;
ingestion is idempotent, so a batch stored twice changes nothing.

A batch is resent under the attempt that sent it, and only while that is still the run's attempt:
a later attempt resumed from a checkpoint and wrote its own points from there on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.experiments.models import Run
from orchestrator.metrics.pipeline import Busy
from orchestrator.metrics.schemas import BatchError, decode_batch
from orchestrator.metrics.services import metrics_ingest, metrics_ingest_points
from trainer.reporting import SPOOL_NAME, batch_body, read_rejected, rejected_lines, write_rejected


@dataclass(frozen=True)
class Resent:
    spool: str
    lines: int
    stored: bool
    detail: str  # what was stored, or why the batch stays marked


def resend_spool(
    *, run: Run, run_dir: Path, spool_name: str, key: str, ingest: Callable[[Run, int, bytes], str]
) -> list[Resent]:
    """Resend every rejected batch of one spool; `ingest(run, attempt, body)` stores a batch body and
    describes what it stored, or raises BatchError. Records of stored batches leave the ledger."""
    left, out = [], []
    for record in read_rejected(run_dir, spool_name):
        lines = rejected_lines(run_dir, spool_name, record)
        if record["attempt"] != run.attempt:
            why = f"sent by attempt {record['attempt']}, the run is on attempt {run.attempt}: left marked"
            left.append(record), out.append(Resent(spool_name, len(lines), False, why))
            continue
        try:
            detail = ingest(run, record["attempt"], batch_body(record["attempt"], key, lines))
        except BatchError as exc:
            errors = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in exc.errors[:3])
            left.append({**record, "reason": f"resend: {errors}"[:500]})
            out.append(Resent(spool_name, len(lines), False, f"refused again: {errors}"))
        except Busy:
            left.append(record), out.append(Resent(spool_name, len(lines), False, "the run's lock was busy: try again"))
        else:
            out.append(Resent(spool_name, len(lines), True, detail))
    write_rejected(run_dir, spool_name, left)
    return out


def ingest_metrics_body(run: Run, attempt: int, body: bytes) -> str:
    decoded = decode_batch(body)
    if decoded is not None:
        return f"{metrics_ingest(run=run, attempt=attempt, points=decoded[1])} points stored"
    parsed = metrics_ingest_points(run=run, attempt=attempt, points=json.loads(body)["points"])
    refused = f", {len(parsed.refused)} refused ({parsed.refused[0]['reason']})" if parsed.refused else ""
    return f"{len(parsed.cols.keys)} points stored{refused}"


def resend_metrics(*, run: Run, run_dir: Path) -> list[Resent]:
    return resend_spool(run=run, run_dir=run_dir, spool_name=SPOOL_NAME, key="points", ingest=ingest_metrics_body)
