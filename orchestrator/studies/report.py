"""An experiment's statistics section: the options read from the query string, the table, the
heatmap grid and the verdicts, as plain data for the template and the exports."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.experiments.models import Experiment, Run
from orchestrator.metrics.models import MetricSeries
from orchestrator.metrics.study_metric import default_metric
from orchestrator.studies.budget import Budget, panel_svg, past_budget
from orchestrator.studies.claims import Thresholds
from orchestrator.studies.roles import apply_roles
from orchestrator.studies.run_rows import configured_staleness
from orchestrator.studies.run_table import write_runs_csv
from orchestrator.studies.statistics import DEFAULT_SUMMARY, SUMMARIES
from orchestrator.studies.table import DEFAULT_METRIC, StudyTable, build_table, grid, group_cells, run_summaries
from orchestrator.studies.verdicts import judged, study_rows, thresholds_from

NEG_RATIO_KEY = "actor/ratio_neg_max"  # largest r of an A < 0 token in a step: the tail no mask or clip touches
MAX_STUDY_RUNS = 2000  # one page computes every run's summary; a larger sweep uses the exports' filters


@dataclass
class StudyOptions:
    metric: str = DEFAULT_METRIC
    how: str = DEFAULT_SUMMARY
    reference: dict | None = None  # a fixed reference cell's sweep values; None: lowest staleness
    reference_index: str = ""
    include_unfinished: bool = False
    thresholds: Thresholds = field(default_factory=Thresholds)
    errors: list[dict[str, str]] = field(default_factory=list)


def metric_keys(run_ids: list[int]) -> list[str]:
    return sorted(set(MetricSeries.objects.filter(run_id__in=run_ids).values_list("key", flat=True)))


def _choice(params, name: str, allowed, default: str, errors: list, message: str) -> str:
    """params[name] when it is one of `allowed`; else the default, and an error naming the field."""
    value = (params.get(name) or "").strip()
    if not value or value in allowed:
        return value or default
    errors.append({"field": name, "message": message.format(value[:80])})
    return default


def options_from(params, runs: list[Run], keys: list[str]) -> StudyOptions:
    """Read metric, summary, ref (a cell's index) and the thresholds; a bad value is named and the
    default used, so the page still renders."""
    opts = StudyOptions(metric=default_metric(keys) or DEFAULT_METRIC)
    opts.metric = _choice(params, "metric", keys, opts.metric, opts.errors, "no run of this experiment logged {!r}")
    opts.how = _choice(
        params, "summary", SUMMARIES, opts.how, opts.errors, "{!r} is not one of " + ", ".join(SUMMARIES)
    )
    ref = (params.get("ref") or "").strip()
    if ref:
        cells = list(group_cells(runs).values())
        if ref.isdigit() and int(ref) < len(cells):
            opts.reference, opts.reference_index = cells[int(ref)].values, ref
        else:
            opts.errors.append({"field": "ref", "message": f"no cell number {ref[:12]!r}"})
    opts.include_unfinished = params.get("unfinished") in ("1", "on", "true")
    opts.thresholds, errors = thresholds_from(params)
    opts.errors += errors
    return opts


def experiment_runs(experiment: Experiment) -> list[Run]:
    return list(experiment.runs.order_by("id").only("id", "sweep_values", "seed", "state")[:MAX_STUDY_RUNS])


@dataclass(frozen=True)
class CellStability:
    """How a cell's seeds held up: how many collapsed, and the A < 0 ratio tail (the largest
    importance ratio of a token with negative advantage over each run: median over seeds, max)."""

    collapsed: int
    seeds: int
    neg_ratio_median: float = math.nan
    neg_ratio_max: float = math.nan

    @property
    def neg_ratio_text(self) -> str:
        if math.isnan(self.neg_ratio_median):
            return ""
        return f"{self.neg_ratio_median:.3g} [max {self.neg_ratio_max:.3g}]"


def cell_stability(table: StudyTable, th: Thresholds) -> dict[str, CellStability]:
    """Per cell (by key): seeds that collapsed (Cell.collapsed at the (d) margin) and the A < 0 tail."""
    runs = [rid for c in table.cells.values() for rid in c.shapes]
    tails = run_summaries(runs, NEG_RATIO_KEY, "best") if runs else {}
    out = {}
    for key, cell in table.cells.items():
        values = [tails[r] for r in cell.shapes if r in tails and math.isfinite(tails[r])]
        out[key] = CellStability(
            cell.collapsed(th.collapse_margin * th.reward_range),
            len(cell.shapes),
            float(np.median(values)) if values else math.nan,
            max(values) if values else math.nan,
        )
    return out


@dataclass
class StudyReport:
    table: StudyTable
    grid: dict[str, Any] | None
    verdicts: list | None
    options: StudyOptions
    keys: list[str]
    cells: list  # (index, label) for the reference picker
    stability: dict[str, CellStability] = field(default_factory=dict)  # by cell key
    budget: Budget | None = None  # the staleness-learning-rate budget the sweep measured
    budget_svg: str = ""  # final reward and collapse rate against S·η, with the fitted boundary
    advisories: list[str] = field(default_factory=list)  # queued runs past the budget


def study_report(experiment: Experiment, params) -> StudyReport | None:
    """None when the experiment has no run with metrics yet."""
    runs = experiment_runs(experiment)
    # runs logged from outside: the config fields that play staleness, objective and seed
    role_errors = apply_roles(runs, params)
    keys = metric_keys([r.pk for r in runs])
    if not keys:
        return None
    opts = options_from(params, runs, keys)
    opts.errors += role_errors
    table = build_table(runs, opts.metric, opts.how, opts.reference, include_unfinished=opts.include_unfinished)
    verdicts, budget = judged(table, opts.thresholds)
    return StudyReport(
        table=table,
        grid=grid(table),
        verdicts=verdicts,
        options=opts,
        keys=keys,
        cells=[(str(i), c.label) for i, c in enumerate(table.cells.values())],
        stability=cell_stability(table, opts.thresholds),
        budget=budget,
        budget_svg=panel_svg(budget) if budget else "",
        advisories=queued_advisories(experiment, budget) if budget else [],
    )


def queued_advisories(experiment: Experiment, budget: Budget) -> list[str]:
    """Each queued run of the experiment whose S·η lies past the budget its finished runs measured."""
    out = []
    for run in experiment.runs.filter(state="queued").order_by("id").only("id", "config"):
        config = run.config or {}
        lr = (config.get("algorithm") or {}).get("lr")
        text = past_budget(configured_staleness(config), float(lr), budget) if lr else None
        if text:
            out.append(f"run #{run.pk} {text}")
    return out


def runs_csv(table: StudyTable, th: Thresholds) -> str:
    """The sweep as the table of runs its verdicts judge (studies/run_table.py), every arm's rows;
    a sweep that is not a staleness study gives the header alone."""
    by_arm = study_rows(table, th) or {}
    return write_runs_csv([row for rows in by_arm.values() for row in rows])
