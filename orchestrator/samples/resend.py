"""Storing again the sample batches a run's trainer marked rejected (see orchestrator.metrics.resend)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.experiments.models import Run
from orchestrator.metrics.resend import Resent, resend_spool
from orchestrator.samples.schemas import parse_batch
from orchestrator.samples.services import samples_ingest
from trainer.reporting import SAMPLES_SPOOL_NAME


def ingest_samples_body(run: Run, attempt: int, body: bytes) -> str:
    result = samples_ingest(run=run, attempt=attempt, samples=parse_batch(body).samples)
    return f"{result.stored} samples stored, {result.duplicates} already there, {result.dropped} thinned by the bound"


def resend_samples(*, run: Run, run_dir: Path) -> list[Resent]:
    return resend_spool(
        run=run, run_dir=run_dir, spool_name=SAMPLES_SPOOL_NAME, key="samples", ingest=ingest_samples_body
    )
