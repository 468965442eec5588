"""The four claims of the paper judged on one sweep over staleness x objective: the sweep's runs as
a table of runs (studies/run_rows.py), judged by studies/judge.py, the same code that judges a CSV
(`study_verdicts`).

Fields swept besides staleness and the objective (a dual clip, a second learning rate) make arms:
each arm gets its own four verdicts, labelled with its values. A sweep without both a staleness
field and algorithm.objective gets no verdicts, and a claim whose cells are missing is
inconclusive and says which runs are missing.
"""

from __future__ import annotations

import math
from typing import Any

from orchestrator.studies.budget import Budget, fit_budget
from orchestrator.studies.claims import Thresholds, Verdict
from orchestrator.studies.judge import judge
from orchestrator.studies.run_rows import run_rows
from orchestrator.studies.run_table import RunRow
from orchestrator.studies.statistics import smoothed_peak
from orchestrator.studies.table import OBJECTIVE_PATH, Cell, StudyTable, cell_key, cell_label, staleness_path


def arms(table: StudyTable, s_path: str) -> dict[str, dict[tuple, Cell]]:
    """Cells by arm (the values of the fields swept besides staleness and the objective, as a
    label; "" when there are none), each arm's cells by (staleness, objective)."""
    out: dict[str, dict[tuple, Cell]] = {}
    for c in table.cells.values():
        rest = {k: v for k, v in c.values.items() if k not in (s_path, OBJECTIVE_PATH)}
        label = cell_label(rest) if rest else ""
        out.setdefault(label, {})[(c.values.get(s_path), c.values.get(OBJECTIVE_PATH))] = c
    return out


def study_rows(table: StudyTable, th: Thresholds = Thresholds()) -> dict[str, list[RunRow]] | None:
    """The sweep's runs as a table of runs, by arm; None when it does not sweep staleness."""
    paths = {p for c in table.cells.values() for p in c.values}
    s_path = staleness_path(paths)
    if s_path is None:
        return None
    return {arm: run_rows(list(by_point.values()), th, table.runs) for arm, by_point in arms(table, s_path).items()}


def study_verdicts(table: StudyTable, th: Thresholds = Thresholds(), extra_checks=None) -> list[Verdict] | None:
    """extra_checks: arm -> claim -> more regime checks."""
    return judged(table, th, extra_checks)[0]


def judged(
    table: StudyTable, th: Thresholds = Thresholds(), extra_checks=None
) -> tuple[list[Verdict] | None, Budget | None]:
    """The verdicts and the staleness-learning-rate budget the sweep measured (over every arm)."""
    by_arm = study_rows(table, th)
    if by_arm is None:
        return None, None
    budget = fit_budget([r for rows in by_arm.values() for r in rows])
    if OBJECTIVE_PATH not in {p for c in table.cells.values() for p in c.values}:
        return None, budget  # a sweep of staleness alone: its budget, but no claims to judge
    out = []
    for arm, rows in by_arm.items():
        if len({r.staleness for r in rows}) < 2:
            continue
        for verdict in judge(rows, th, (extra_checks or {}).get(arm), budget):
            verdict.numbers["arm"] = arm
            out.append(verdict)
    return out or None, budget


THRESHOLD_FIELDS = (
    "margin_a",
    "equivalence_margin",
    "mask_ratio",
    "collapse_margin",
    "collapse_horizon",
    "reward_range",
    "m2_regime",
    "near_det_min",
    "movement_min",
    "run_length",
)


def thresholds_from(params: Any) -> tuple[Thresholds, list[dict[str, str]]]:
    """Thresholds from query parameters (each a Thresholds field), each a positive number; errors
    name the parameter, and its default stays."""
    defaults = Thresholds()
    values, errors = {}, []
    for name in THRESHOLD_FIELDS:
        raw = (params.get(name) or "").strip()
        if not raw:
            continue
        try:
            value = float(raw) if len(raw) <= 32 else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            errors.append(
                {
                    "field": name,
                    "message": f"must be a positive number (got {raw[:32]!r}); using {getattr(defaults, name)}",
                }
            )
            continue
        values[name] = value
    return Thresholds(**values), errors


__all__ = ["study_verdicts", "study_rows", "thresholds_from", "smoothed_peak", "cell_key"]
