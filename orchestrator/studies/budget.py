"""The staleness-learning-rate budget: where a sweep's runs sit on S·η, and where collapse begins.

"Staleness-Learning Rate Scaling Laws for Asynchronous RLHF" (arXiv 2607.01083) bounds the
per-step bias of stale rollouts by O(S·η), S the staleness in updates and η the learning rate, and
gives the rule η ≪ min{R_batch/(S·G), R_crit/(T·G)}: either S·η or the cumulative drift T·η (T the
updates trained) governs collapse. Its constants (the radii R and the gradient bound G) are not
known for a lab's model and task, so the product measures the budget instead of computing it:

- each run has S·η and T·η (S: the staleness the run reached, η: algorithm.lr, T: its updates);
- a sweep's runs are grouped by S·η; per group the mean final reward (the study metric's tail) and
  the collapse rate (runs that fell the (d) margin below their peak, or turned non-finite);
- the fitted boundary is the S·η where the collapse rate first reaches one half: the geometric
  mean of the last group below it and the first at or above it (collapse is taken to grow with
  S·η; the groups between are what the fit rests on). Without a collapse the budget is only known
  to reach past the largest S·η measured, and with collapse at every S·η measured only to lie below
  them: either way the regime check is "not measured" (a study cannot measure its own budget from
  one learning rate and one staleness). The no-clip runs are left out of the fit: their collapse
  is claim (d)'s subject, not a property of the budget the other objectives run under.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from orchestrator.studies.claims import RegimeCheck
from orchestrator.studies.run_table import RunRow

PAPER = "arXiv 2607.01083"
COLLAPSE_RATE = 0.5
EXCLUDED_FROM_FIT = ("no_clip",)


@dataclass(frozen=True)
class BudgetGroup:
    s_lr: float
    runs: int
    collapse_rate: float
    final_reward: float | None
    staleness: tuple[int, ...]
    lrs: tuple[float, ...]
    t_lr: float | None  # mean T·η of the group's runs


@dataclass(frozen=True)
class Budget:
    groups: tuple[BudgetGroup, ...]
    boundary: float | None  # the fitted S·η where collapse begins; None: no collapse measured
    reaches: float | None  # the largest S·η measured without collapse (a lower bound without a boundary)
    collapses_from: float | None = None  # without a boundary: the smallest S·η measured, where runs already collapsed

    @property
    def text(self) -> str:
        if self.boundary is not None:
            return (
                f"collapse begins near S·η = {self.boundary:.3g} (fitted: the geometric mean of the S·η groups on "
                f"either side of a {COLLAPSE_RATE:.0%} collapse rate; {PAPER})"
            )
        if self.collapses_from is not None:
            return (
                f"runs collapse at every S·η measured, from {self.collapses_from:.3g}: the budget lies below, "
                f"where this sweep has no runs ({PAPER})"
            )
        if self.reaches is not None:
            return f"no collapse up to S·η = {self.reaches:.3g}, the largest measured ({PAPER})"
        return f"no stale runs to measure a budget ({PAPER})"

    def as_dict(self) -> dict:
        return {
            "boundary": self.boundary,
            "reaches": self.reaches,
            "groups": [g.__dict__ for g in self.groups],
            "text": self.text,
        }


def s_lr(row: RunRow) -> float:
    return row.staleness * row.lr if math.isfinite(row.lr) else math.nan


def t_lr(row: RunRow) -> float:
    return row.length * row.lr if math.isfinite(row.lr) and math.isfinite(row.length) else math.nan


def fit_budget(rows: list[RunRow]) -> Budget:
    by: dict[float, list[RunRow]] = defaultdict(list)
    for r in rows:
        x = s_lr(r)
        if r.objective not in EXCLUDED_FROM_FIT and math.isfinite(x) and x > 0 and r.collapsed is not None:
            by[float(f"{x:.6g}")].append(r)
    groups = []
    for x in sorted(by):
        runs = by[x]
        tails = [r.tail for r in runs if math.isfinite(r.tail)]
        drifts = [t_lr(r) for r in runs if math.isfinite(t_lr(r))]
        groups.append(
            BudgetGroup(
                s_lr=x,
                runs=len(runs),
                collapse_rate=sum(bool(r.collapsed) for r in runs) / len(runs),
                final_reward=float(np.mean(tails)) if tails else None,
                staleness=tuple(sorted({r.staleness for r in runs})),
                lrs=tuple(sorted({r.lr for r in runs})),
                t_lr=float(np.mean(drifts)) if drifts else None,
            )
        )
    first = next((i for i, g in enumerate(groups) if g.collapse_rate >= COLLAPSE_RATE), None)
    if first is None:
        return Budget(tuple(groups), None, groups[-1].s_lr if groups else None)
    below = [g for g in groups[:first] if g.collapse_rate < COLLAPSE_RATE]
    if not below:  # collapse at every S·η measured: the budget lies below them all, where nothing was measured
        return Budget(tuple(groups), None, None, groups[first].s_lr)
    return Budget(tuple(groups), math.sqrt(below[-1].s_lr * groups[first].s_lr), below[-1].s_lr)


def budget_check(rows: list[RunRow], budget: Budget) -> RegimeCheck:
    """The study's stale runs at or under the budget its sweep measured."""
    stale = [s_lr(r) for r in rows if r.staleness > 0 and math.isfinite(s_lr(r))]
    if not stale:
        return RegimeCheck("budget", "S·η: not measured (no learning rate)", None)
    x = max(stale)
    if budget.boundary is None:
        return RegimeCheck(
            "budget",
            f"S·η = {x:.3g}; the sweep measured no boundary: {budget.text}",
            None,
            value=x,
        )
    ok = x <= budget.boundary
    return RegimeCheck(
        "budget",
        f"S·η = {x:.3g} {'within' if ok else 'past'} the budget the sweep measured: {budget.text}",
        ok,
        value=x,
        limit=budget.boundary,
    )


def past_budget(s: int, lr: float, budget: Budget) -> str | None:
    """An advisory for a run queued at staleness `s` and learning rate `lr`, or None within the budget."""
    if budget.boundary is None or s <= 0 or not s * lr > budget.boundary:
        return None
    return (
        f"queued at S·η = {s * lr:.3g} (staleness {s} x lr {lr:g}), past the budget this sweep measured: "
        f"{budget.text}. Advisory: the run may collapse; a smaller lr or staleness keeps it within."
    )


# --- the panel ---------------------------------------------------------------------------------

WIDTH, HEIGHT, PAD = 520, 240, 44


def panel_svg(budget: Budget) -> str:
    """Final reward (dots) and collapse rate (squares) against S·η on a log axis, with the fitted
    boundary as a dashed line: an inline SVG the page and the report embed as they are."""
    groups = [g for g in budget.groups if g.s_lr > 0]
    if len(groups) < 2:
        return ""
    xs = [math.log10(g.s_lr) for g in groups]
    lo, hi = min(xs), max(xs)
    if budget.boundary:
        lo, hi = min(lo, math.log10(budget.boundary)), max(hi, math.log10(budget.boundary))
    span = (hi - lo) or 1.0

    def px(x: float) -> float:
        return PAD + (math.log10(x) - lo) / span * (WIDTH - 2 * PAD)

    def py(y: float) -> float:
        return HEIGHT - PAD - y * (HEIGHT - 2 * PAD)

    parts = [
        f'<svg class="budget-panel" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="final reward and collapse rate against S·η">',
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#888"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#888"/>',
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 8}" text-anchor="middle" font-size="11">S·η (log)</text>',
        f'<text x="12" y="{PAD - 10}" font-size="11">reward (●) · collapse rate (■), 0–1</text>',
    ]
    for g in groups:
        x = px(g.s_lr)
        label = f"S·η {g.s_lr:.3g}: staleness {'/'.join(map(str, g.staleness))}, lr {'/'.join(f'{v:g}' for v in g.lrs)}"
        parts.append(
            f'<text x="{x:.1f}" y="{HEIGHT - PAD + 14}" text-anchor="middle" font-size="9">{g.s_lr:.2g}</text>'
        )
        if g.final_reward is not None:
            parts.append(
                f'<circle class="budget-reward" cx="{x:.1f}" cy="{py(min(max(g.final_reward, 0), 1)):.1f}" r="4" '
                f'fill="#1f77b4" data-s-lr="{g.s_lr:.6g}"><title>{label}: reward {g.final_reward:.3f}</title></circle>'
            )
        parts.append(
            f'<rect class="budget-collapse" x="{x - 4:.1f}" y="{py(g.collapse_rate) - 4:.1f}" width="8" height="8" '
            f'fill="#d62728" data-s-lr="{g.s_lr:.6g}"><title>{label}: {g.collapse_rate:.0%} of {g.runs} collapsed'
            "</title></rect>"
        )
    if budget.boundary:
        x = px(budget.boundary)
        parts.append(
            f'<line class="budget-boundary" x1="{x:.1f}" y1="{PAD}" x2="{x:.1f}" y2="{HEIGHT - PAD}" '
            f'stroke="#333" stroke-dasharray="4 3"><title>{budget.text}</title></line>'
        )
    parts.append("</svg>")
    return "".join(parts)
