"""A study as a table of runs: one row per run with the numbers the claims' tests read, so a study
run elsewhere (verl, imported histories) or a crafted case is judged by the same code as a sweep of
this product. Every study writes its table as CSV beside its report (`study_report`), and
`python manage.py study_verdicts RUNS.csv --json` judges one.

Columns (RUN_COLUMNS; an empty cell is "not measured" where the column allows it):
- objective: grpo, m2po, no_clip, ... ; staleness: in optimizer updates, 0 = on-policy; seed;
  warmup: the checkpoint the run forked from (may be empty); lr: the learning rate;
- updates_after_ramp: updates trained after the staleness reached its level;
- tail: the study metric's summary of the run (the mean of its last 10% of updates);
- m2_median_over_tau: median M2 before masking over the updates after the ramp, divided by tau;
- masked_fraction (m2po) / clipped_fraction (clip objectives): the fraction of tokens masked or
  clipped, mean over the updates after the ramp (`*_whole_run`, optional: over the whole run);
- near_deterministic_fraction: tokens with entropy below 0.1 nats; reward_movement: tail minus the
  mean of the first 10% of updates; collapsed: 1 when the run fell the (d) margin below its peak or
  turned non-finite, else 0.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict, dataclass, fields

RUN_COLUMNS = (
    "objective",
    "staleness",
    "seed",
    "warmup",
    "lr",
    "updates_after_ramp",
    "tail",
    "m2_median_over_tau",
    "masked_fraction",
    "clipped_fraction",
    "near_deterministic_fraction",
    "reward_movement",
    "collapsed",
)
OPTIONAL_COLUMNS = ("masked_fraction_whole_run", "clipped_fraction_whole_run", "updates")
REQUIRED = ("objective", "staleness", "seed", "tail")  # the rest may be empty: not measured
COLLAPSED_VALUES = {"0": False, "1": True, "0.0": False, "1.0": True, "false": False, "true": True}


class RunTableError(ValueError):
    """A table of runs that cannot be read; the message names the row and the column."""


@dataclass(frozen=True)
class RunRow:
    objective: str
    staleness: int
    seed: str
    warmup: str = ""
    lr: float = math.nan
    updates_after_ramp: float = math.nan
    tail: float = math.nan
    m2_median_over_tau: float = math.nan
    masked_fraction: float = math.nan
    clipped_fraction: float = math.nan
    near_deterministic_fraction: float = math.nan
    reward_movement: float = math.nan
    collapsed: bool | None = None
    masked_fraction_whole_run: float = math.nan
    clipped_fraction_whole_run: float = math.nan
    updates: float = math.nan  # the run's length in updates; empty: staleness + updates_after_ramp

    @property
    def unit(self) -> tuple[str, str]:
        """What pairs runs across cells: the warm-up they forked from and their seed."""
        return (self.warmup, self.seed)

    @property
    def length(self) -> float:
        return self.updates if math.isfinite(self.updates) else self.staleness + self.updates_after_ramp


def _number(raw: str, where: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise RunTableError(f"{where}: {raw[:40]!r} is not a number") from None
    if math.isinf(value):
        raise RunTableError(f"{where}: {raw[:40]!r} is not finite")
    return value


def _row(record: dict, line: int) -> RunRow:
    def at(column: str) -> str:
        return (record.get(column) or "").strip()

    for column in REQUIRED:
        if not at(column):
            raise RunTableError(f"row {line}, column {column!r}: empty (it is required)")
    values: dict = {"objective": at("objective"), "seed": at("seed"), "warmup": at("warmup")}
    staleness = _number(at("staleness"), f"row {line}, column 'staleness'")
    if staleness < 0 or staleness != int(staleness):
        raise RunTableError(f"row {line}, column 'staleness': {at('staleness')!r} is not a whole number of updates ≥ 0")
    values["staleness"] = int(staleness)
    for f in fields(RunRow):
        if f.name in values or f.name == "collapsed":
            continue
        raw = at(f.name)
        if raw:
            values[f.name] = _number(raw, f"row {line}, column {f.name!r}")
    raw = at("collapsed")
    if raw:
        flag = COLLAPSED_VALUES.get(raw.lower())
        if flag is None:
            raise RunTableError(f"row {line}, column 'collapsed': {raw[:40]!r} is not 0 or 1")
        values["collapsed"] = flag
    if math.isfinite(values.get("lr", math.nan)) and values["lr"] <= 0:
        raise RunTableError(f"row {line}, column 'lr': {at('lr')!r} must be positive")
    return RunRow(**values)


def read_runs_csv(text: str) -> list[RunRow]:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in reader.fieldnames or []]
    missing = [c for c in RUN_COLUMNS if c not in header]
    if missing:
        raise RunTableError(f"header: missing column(s) {', '.join(missing)}")
    reader.fieldnames = header
    rows = [_row(record, line) for line, record in enumerate(reader, start=2)]
    if not rows:
        raise RunTableError("the table has no runs")
    return rows


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return str(value)


DERIVED_COLUMNS = ("s_lr", "t_lr")  # staleness x lr and updates x lr (studies/budget.py); read back as unknown


def write_runs_csv(rows: list[RunRow]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    columns = RUN_COLUMNS + OPTIONAL_COLUMNS
    writer.writerow(columns + DERIVED_COLUMNS)
    for row in rows:
        record = asdict(row)
        derived = (row.staleness * row.lr, row.length * row.lr)
        writer.writerow([_cell(record[c]) for c in columns] + [_cell(float(v)) for v in derived])
    return buf.getvalue()
