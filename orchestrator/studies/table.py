"""A sweep's seed statistics: one row per cell (a point of the sweep grid), its runs' summary
values, their mean with a 95% Student-t CI, and the difference from a reference cell with its Welch CI.

The reference of a cell defaults to the same cell at the lowest swept staleness ("staleness 0 with
the same objective"); a fixed reference cell can be chosen instead. Only runs that succeeded count
by default: a running run's tail is early training, and a failed run is not a seed's outcome. The
runs left out are counted by state beside each cell (`include_unfinished` counts every run with
data, for a provisional look at a live sweep).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.metrics.chunks import live_points
from orchestrator.studies.statistics import (
    DEFAULT_SUMMARY,
    Estimate,
    difference_interval,
    head_mean,
    seed_interval,
    smoothed_peak,
    summarize,
)
from trainer.vocabulary import updates_per_step

SUCCEEDED = "succeeded"
# staleness.s: the staleness in optimizer updates, as run names show it (s = k x updates per step)
STALENESS_PATHS = ("staleness.s", "staleness.k", "staleness.max_staleness")
OBJECTIVE_PATH = "algorithm.objective"
DEFAULT_METRIC = "train/reward_mean"
NON_FINITE_KEYS = ("actor/pg_loss", "actor/grad_norm")  # a run whose loss or gradient turned NaN/inf


def cell_label(values: dict[str, Any]) -> str:
    return ", ".join(f"{path}={value}" for path, value in sorted(values.items())) or "(no sweep)"


def cell_key(values: dict[str, Any]) -> str:
    return json.dumps(values, sort_keys=True, default=str)


@dataclass(frozen=True)
class RunShape:
    """One run's curve of the study metric, in the numbers the verdicts and checks need."""

    head: float  # mean over the first 10% of updates
    tail: float  # mean over the last 10%
    auc: float  # mean over the run: the area under the curve per update
    peak: float  # best 5% moving average
    non_finite: bool  # the metric, the loss or the gradient norm turned NaN/inf somewhere

    @property
    def movement(self) -> float:
        return self.tail - self.head

    def fell(self, margin: float) -> bool:
        """Collapsed: non-finite, or the tail at least `margin` below the smoothed peak."""
        return self.non_finite or self.peak - self.tail >= margin


@dataclass
class Cell:
    values: dict[str, Any]  # the swept fields (seeds excluded)
    run_ids: list[int]
    run_values: dict[int, float] = field(default_factory=dict)  # run -> its summary, runs with data only
    estimate: Estimate = Estimate(math.nan, math.nan, math.nan, 0)
    iqm: Estimate = Estimate(math.nan, math.nan, math.nan, 0)  # interquartile mean, percentile bootstrap (descriptive)
    shapes: dict[int, RunShape] = field(default_factory=dict)  # run -> its curve's shape, runs with data only
    reference: str | None = None  # cell_key of the reference cell
    difference: Estimate | None = None
    left_out: Counter = field(default_factory=Counter)  # runs not counted, by reason

    @property
    def key(self) -> str:
        return cell_key(self.values)

    @property
    def label(self) -> str:
        return cell_label(self.values)

    @property
    def missing(self) -> int:
        return len(self.run_ids) - len(self.run_values)

    @property
    def left_out_text(self) -> str:
        return ", ".join(f"{n} {why}" for why, n in sorted(self.left_out.items()))

    @property
    def estimate_text(self) -> str:
        return interval_text(self.estimate)

    @property
    def iqm_text(self) -> str:
        return interval_text(self.iqm)

    def area(self) -> Estimate:
        """Mean over seeds of each run's mean over the run (the area under the curve), with its CI."""
        return seed_interval([shape.auc for shape in self.shapes.values()])

    def collapsed(self, margin: float) -> int:
        return sum(shape.fell(margin) for shape in self.shapes.values())

    @property
    def difference_text(self) -> str:
        return interval_text(self.difference, signed=True) if self.difference else ""

    # The heatmap says "n=1, no CI" once under the cell, so its numbers leave the note out.
    @property
    def estimate_short(self) -> str:
        return interval_text(self.estimate, note=False)

    @property
    def iqm_short(self) -> str:
        return interval_text(self.iqm, note=False)

    @property
    def difference_short(self) -> str:
        return interval_text(self.difference, signed=True, note=False) if self.difference else ""


def staleness_path(paths) -> str | None:
    return next((p for p in STALENESS_PATHS if p in paths), None)


def default_reference(values: dict[str, Any], cells: dict[str, Cell]) -> str | None:
    """The same cell at the lowest swept staleness; None when staleness is not swept (or this is it)."""
    path = staleness_path(values)
    if path is None:
        return None
    lowest = min(
        (c.values[path] for c in cells.values() if path in c.values and _same_except(c.values, values, path)),
        default=None,
    )
    if lowest is None or lowest == values[path]:
        return None
    return cell_key({**values, path: lowest})


def _same_except(a: dict, b: dict, path: str) -> bool:
    return {k: v for k, v in a.items() if k != path} == {k: v for k, v in b.items() if k != path}


NESTING_PATHS = ("init.from_run",)  # swept warm-ups: runs nest inside them, they make no cell of their own


def in_updates(values: dict[str, Any], config: dict | None) -> dict[str, Any]:
    """A run's swept values with staleness.k as staleness.s, in optimizer updates (k x updates per
    step x epochs), the unit run names use: s0/s4/s16, not k 0/2/8 beside them."""
    k = values.get("staleness.k")
    if config is None or not isinstance(k, int) or isinstance(k, bool):
        return values
    s = k * updates_per_step(config)
    return {
        ("staleness.s" if path == "staleness.k" else path): (s if path == "staleness.k" else v)
        for path, v in values.items()
    }


def group_cells(runs) -> dict[str, Cell]:
    """Runs (with .pk, .sweep_values and .state) grouped by their grid point, in the order first seen;
    a swept warm-up (init.from_run) pools into its cell, its runs nested in it."""
    cells: dict[str, Cell] = {}
    for run in runs:
        swept = {k: v for k, v in (run.sweep_values or {}).items() if k not in NESTING_PATHS}
        # the bundled trainer's k counts batches; a logged run's staleness is what its role mapping reads
        bundled = getattr(run, "uses_bundled_trainer", True)
        values = in_updates(swept, getattr(run, "config", None)) if bundled else swept
        cells.setdefault(cell_key(values), Cell(values=values, run_ids=[])).run_ids.append(run.pk)
    return cells


def run_summaries(run_ids: list[int], metric: str, how: str = DEFAULT_SUMMARY) -> dict[int, float]:
    """Each run's summary of `metric` (see statistics.summarize); runs without points are absent.
    A curve that turned non-finite summarises to NaN, so the seed statistics count it out."""
    curves = {rid: pts for (rid, _), pts in live_points(run_ids, [metric]).items()}
    out = {}
    for rid, pts in curves.items():
        finite = pts.specials == 0
        if how != "best" and not finite.all():
            out[rid] = math.nan
            continue
        out[rid] = summarize(pts.steps[finite], pts.values[finite], how)
    return out


def run_shapes(
    run_ids: list[int], metric: str, how: str = DEFAULT_SUMMARY
) -> tuple[dict[int, float], dict[int, RunShape]]:
    """Each run's summary of `metric` (as run_summaries gives it) and its RunShape (finite points
    only), from one read of the curves; runs without points are absent from both."""
    curves = live_points(run_ids, [metric, *NON_FINITE_KEYS])
    values, shapes = {}, {}
    for rid in run_ids:
        pts = curves.get((rid, metric))
        if pts is None:
            continue
        finite = pts.specials == 0
        steps, vals = pts.steps[finite], pts.values[finite]
        values[rid] = math.nan if how != "best" and not finite.all() else summarize(steps, vals, how)
        order = np.argsort(steps, kind="stable")
        broken = not finite.all() or any(
            bool((curves[(rid, k)].specials != 0).any()) for k in NON_FINITE_KEYS if (rid, k) in curves
        )
        shapes[rid] = RunShape(
            head=head_mean(steps, vals),
            tail=summarize(steps, vals, "tail_mean"),
            auc=summarize(steps, vals, "mean"),
            peak=smoothed_peak(vals[order]),
            non_finite=broken,
        )
    return values, shapes


@dataclass
class StudyTable:
    metric: str
    how: str
    cells: dict[str, Cell]
    reference_mode: str  # "staleness 0 of the same cell" or the chosen cell's label
    runs: dict[int, Any] = field(default_factory=dict)  # pk -> the run as judged (roles applied in memory)

    def rows(self) -> list[dict[str, Any]]:
        """Flat rows for display and export."""
        out = []
        for cell in self.cells.values():
            ref = self.cells.get(cell.reference) if cell.reference else None
            out.append(
                {
                    "cell": cell.label,
                    **{f"sweep:{k}": v for k, v in cell.values.items()},
                    "seeds": cell.estimate.n,
                    "left_out": cell.left_out_text,
                    "mean": cell.estimate.mean,
                    "ci_low": cell.estimate.low,
                    "ci_high": cell.estimate.high,
                    "iqm": cell.iqm.mean,
                    "iqm_ci_low": cell.iqm.low,
                    "iqm_ci_high": cell.iqm.high,
                    "reference": ref.label if ref else "",
                    "difference": cell.difference.mean if cell.difference else math.nan,
                    "difference_ci_low": cell.difference.low if cell.difference else math.nan,
                    "difference_ci_high": cell.difference.high if cell.difference else math.nan,
                    "runs": {str(rid): cell.run_values.get(rid) for rid in cell.run_ids},
                }
            )
        return out


def build_table(
    runs,
    metric: str = DEFAULT_METRIC,
    how: str = DEFAULT_SUMMARY,
    reference: dict | None = None,
    include_unfinished: bool = False,
) -> StudyTable:
    """The statistics of `runs` (one experiment's). `reference`: the swept values of a fixed
    reference cell; None: each cell's lowest-staleness sibling."""
    runs = list(runs)
    cells = group_cells(runs)
    state = {r.pk: r.state for r in runs}
    counted = [r.pk for r in runs if include_unfinished or r.state == SUCCEEDED]
    summaries, shapes = run_shapes(counted, metric, how)
    for cell in cells.values():
        cell.run_values = {rid: summaries[rid] for rid in cell.run_ids if rid in summaries}
        cell.shapes = {rid: shapes[rid] for rid in cell.run_ids if rid in shapes}
        cell.left_out = Counter(
            "without data" if rid in counted else state[rid] for rid in cell.run_ids if rid not in cell.run_values
        )
        cell.estimate = seed_interval(list(cell.run_values.values()))
        cell.iqm = seed_interval(list(cell.run_values.values()), statistic="iqm")
    fixed = cell_key(reference) if reference is not None else None
    if fixed is not None and fixed not in cells:
        raise ValueError(f"reference: no cell with {cell_label(reference)}")
    for cell in cells.values():
        cell.reference = (
            fixed
            if fixed is not None and fixed != cell.key
            else (None if fixed else default_reference(cell.values, cells))
        )
        if cell.reference:
            cell.difference = difference_interval(
                list(cell.run_values.values()), list(cells[cell.reference].run_values.values())
            )
    mode = cell_label(reference) if reference is not None else "the same cell at the lowest staleness"
    return StudyTable(metric=metric, how=how, cells=cells, reference_mode=mode, runs={r.pk: r for r in runs})


# --- export --------------------------------------------------------------------------------------

EXPORT_COLUMNS = (
    "cell",
    "seeds",
    "left_out",
    "mean",
    "ci_low",
    "ci_high",
    "iqm",
    "iqm_ci_low",
    "iqm_ci_high",
    "reference",
    "difference",
    "difference_ci_low",
    "difference_ci_high",
)


def _num(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.6g}"


def as_csv(table: StudyTable) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["metric", "summary", *EXPORT_COLUMNS])
    for row in table.rows():
        writer.writerow(
            [table.metric, table.how, *[row[c] if isinstance(row[c], str) else _num(row[c]) for c in EXPORT_COLUMNS]]
        )
    return buf.getvalue()


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    return value


def as_json(table: StudyTable, verdicts: list | None = None) -> str:
    body = {
        "metric": table.metric,
        "summary": table.how,
        "confidence": 0.95,
        "reference": table.reference_mode,
        "cells": table.rows(),
    }
    if verdicts is not None:
        body["verdicts"] = [
            {"claim": v.claim, "status": v.status, "reason": v.reason, "numbers": v.numbers} for v in verdicts
        ]
    return json.dumps(_json_safe(body), indent=1)


def interval_text(e: Estimate | None, digits: int = 3, signed: bool = False, note: bool = True) -> str:
    """ "0.612 [0.580, 0.641]": the mean and its 95% CI (an IQM's bootstrap CI need not be symmetric).
    Without an interval (one seed), the mean and "(n=1, no CI)", or the mean alone when not `note`."""
    if e is None or e.n == 0 or math.isnan(e.mean):
        return "–"
    sign = "+" if signed else ""
    if not e.has_interval:
        return f"{e.mean:{sign}.{digits}f}" + (f" (n={e.n}, no CI)" if note else "")
    return f"{e.mean:{sign}.{digits}f} [{e.low:{sign}.{digits}f}, {e.high:{sign}.{digits}f}]"


def estimates_text(*named: tuple[str, dict | None]) -> str:
    """A verdict's measured estimates side by side, e.g. "on-policy 0.820 [0.800, 0.840] · stale
    clip 0.530 [0.500, 0.560]"; when any has no interval (one seed), the means alone and the note
    "(n=1, no CI)" once at the end, never "[nan, nan]"."""
    estimates = [(label, Estimate(**d)) for label, d in named if d]
    if not any(e.n for _, e in estimates):
        return ""  # nothing measured yet: the verdict's reason says so
    fewest = min(e.n for _, e in estimates)
    with_ci = all(e.has_interval for _, e in estimates)
    body = " · ".join(f"{label} {interval_text(e, note=False)}" for label, e in estimates)
    return body if with_ci or not fewest else f"{body} (n={fewest}, no CI)"


def as_markdown(table: StudyTable, stability: dict | None = None) -> str:
    """The cells as a Markdown table; with `stability` (report.cell_stability) also each cell's
    collapsed seeds and A < 0 ratio tail."""
    lines = [
        f"{table.metric}, {table.how} per run; mean over seeds with a 95% Student-t CI, and the IQM with its "
        f"bootstrap CI; difference against {table.reference_mode}.",
        "",
    ]
    extra = " collapsed | A<0 r max, median [max] |" if stability is not None else ""
    lines += [
        f"| cell | seeds | mean [95% CI] | IQM [95% CI] |{extra} difference [95% CI] |",
        "|---|---|---|---|" + ("---|---|" if stability is not None else "") + "---|",
    ]
    for cell in table.cells.values():
        seeds = f"{cell.estimate.n}" + (f" ({cell.left_out_text} left out)" if cell.left_out else "")
        diff = (
            interval_text(cell.difference, signed=True)
            if cell.difference
            else "(reference)"
            if _is_reference(table, cell)
            else "–"
        )
        more = ""
        if stability is not None:
            st = stability.get(cell.key)
            more = f" {st.collapsed}/{st.seeds} | {st.neg_ratio_text or '–'} |" if st else " – | – |"
        lines.append(
            f"| {cell.label} | {seeds} | {interval_text(cell.estimate)} | {interval_text(cell.iqm)} |{more} {diff} |"
        )
    return "\n".join(lines) + "\n"


def _is_reference(table: StudyTable, cell: Cell) -> bool:
    return any(other.reference == cell.key for other in table.cells.values())


def grid(table: StudyTable) -> dict[str, Any] | None:
    """Staleness (rows) x the other swept field (columns) for the heatmap, when the sweep has two
    fields one of which is staleness; else None (the flat table shows it)."""
    paths = sorted({p for c in table.cells.values() for p in c.values})
    s_path = staleness_path(paths)
    others = [p for p in paths if p != s_path]
    if s_path is None or len(others) != 1:
        return None
    col_path = others[0]
    rows = sorted({c.values.get(s_path) for c in table.cells.values()}, key=_sort_key)
    cols = sorted({c.values.get(col_path) for c in table.cells.values()}, key=_sort_key)
    lookup = {(c.values.get(s_path), c.values.get(col_path)): c for c in table.cells.values()}
    means = [c.estimate.mean for c in table.cells.values() if math.isfinite(c.estimate.mean)]
    lo, hi = (min(means), max(means)) if means else (0.0, 1.0)

    def shade(cell: Cell | None) -> str:
        if cell is None or not math.isfinite(cell.estimate.mean):
            return ""
        t = (cell.estimate.mean - lo) / (hi - lo) if hi > lo else 0.5
        return f"background: hsl(210, 70%, {92 - 40 * t:.0f}%);{' color: #fff;' if t > 0.6 else ''}"

    return {
        "row_path": s_path,
        "col_path": col_path,
        "cols": cols,
        "rows": [{"value": r, "cells": [(lookup.get((r, c)), shade(lookup.get((r, c)))) for c in cols]} for r in rows],
    }


def _sort_key(value):
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))
