"""A logged table as rollout samples: a table (the SDK's `Table`, through the run's updates
endpoint) whose columns name a prompt and a response is stored as samples too, so it shows on the
run's samples card."""

from __future__ import annotations

import math
import time
from typing import Any

from orchestrator.samples.schemas import MAX_TEXT, SampleIn
from orchestrator.samples.services import samples_ingest

# The column names a table's rows need to be rollout samples, and the names each may go by.
SAMPLE_COLUMNS = {
    "prompt": ("prompt", "prompts", "input", "question", "query"),
    "response": ("response", "responses", "completion", "completions", "output", "generation"),
    "reward": ("reward", "rewards", "score"),
    "reference": ("reference", "ground_truth", "target", "solution", "answer"),
}
EVAL_PREFIXES = ("eval", "val", "test")


def _column_of(columns: list[str], names: tuple[str, ...]) -> int | None:
    lowered = [c.strip().lower() for c in columns]
    return next((lowered.index(n) for n in names if n in lowered), None)


def table_samples(key: str, step: int, columns: list[str], rows: list[list[Any]]) -> list:
    """The rows as rollout samples when the table has a prompt and a response column, else []:
    an eval table (key starting eval/val/test) gives eval samples, any other train samples."""

    at = {name: _column_of(columns, names) for name, names in SAMPLE_COLUMNS.items()}
    if at["prompt"] is None or at["response"] is None:
        return []
    kind = "eval" if key.split("/", 1)[0].strip().lower().startswith(EVAL_PREFIXES) else "train"
    now = time.time()

    def text(row, name):
        return None if at[name] is None or row[at[name]] is None else str(row[at[name]])[:MAX_TEXT]

    def reward(row):
        value = None if at["reward"] is None else row[at["reward"]]
        return (
            float(value)
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            else None
        )

    return [
        SampleIn(
            kind=kind,
            step=step,
            index=i,
            eval_set=key[:200] if kind == "eval" else None,
            prompt=text(row, "prompt") or "",
            response=text(row, "response") or "",
            reference=text(row, "reference"),
            reward=reward(row),
            time=now,
        )
        for i, row in enumerate(rows[:1_000])
    ]


def samples_from_table(*, run, key: str, step: int, columns: list[str], rows: list[list[Any]]) -> int:
    """Store the table's rows as the run's samples where its columns fit; how many are kept."""
    samples = table_samples(key, step, columns, rows)
    if not samples:
        return 0
    result = samples_ingest(run=run, attempt=run.attempt, samples=samples)
    return result.stored + result.duplicates
