"""The four claims of the paper judged on one sweep over staleness x objective, each with its regime
checks (studies/regime.py).

Which cells answer which claim:
- on-policy: the clip objective (grpo, else another clip objective in the sweep) at the lowest
  swept staleness;
- (a) the same clip objective at the highest staleness against on-policy, on the study metric's
  summary and on the area under the curve (each run's mean over its updates): a task that
  saturates hides a slower learner in the tail;
- (b) m2po at the highest staleness against on-policy;
- (c) the mean over the run of `actor/clip_frac` (masked tokens for m2po, clipped tokens for the
  clip objectives), averaged over seeds, m2po against clip at the highest staleness, with the same
  per token class (`actor/marked_frac_decision`, `..._format`) where the task logs them;
- (d) no_clip at the highest staleness: per seed, the peak of its smoothed curve against its tail
  mean, and whether any training value turned non-finite.

Fields swept besides staleness and the objective (a dual clip, a second learning rate) make arms:
each arm gets its own four verdicts, labelled with its values. A sweep without both a staleness
field and algorithm.objective gets no verdicts, and a claim whose cells are missing is
inconclusive and says which cell is missing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from orchestrator.studies import claims, regime
from orchestrator.studies.claims import INCONCLUSIVE, REGIME, TESTABLE, Thresholds, Verdict, within_regime
from orchestrator.studies.statistics import smoothed_peak
from orchestrator.studies.table import (
    OBJECTIVE_PATH,
    Cell,
    StudyTable,
    cell_key,
    cell_label,
    run_summaries,
    staleness_path,
)

CLIP_OBJECTIVES = ("grpo", "decoupled_ppo", "gspo")
FRACTION_KEY = "actor/clip_frac"
CLASS_FRACTION_KEYS = {"decision": "actor/marked_frac_decision", "format": "actor/marked_frac_format"}
SUMMARY_LABELS = {
    "tail_mean": "the tail",
    "last": "the last value",
    "best": "the best value",
    "mean": "the area under the curve",
}


def _missing(claim: str, what: str) -> Verdict:
    return Verdict(claim, INCONCLUSIVE, f"the sweep has no {what} cell", {})


def arms(table: StudyTable, s_path: str) -> dict[str, dict[tuple, Cell]]:
    """Cells by arm (the values of the fields swept besides staleness and the objective, as a
    label; "" when there are none), each arm's cells by (staleness, objective)."""
    out: dict[str, dict[tuple, Cell]] = {}
    for c in table.cells.values():
        rest = {k: v for k, v in c.values.items() if k not in (s_path, OBJECTIVE_PATH)}
        label = cell_label(rest) if rest else ""
        out.setdefault(label, {})[(c.values.get(s_path), c.values.get(OBJECTIVE_PATH))] = c
    return out


def study_verdicts(table: StudyTable, th: Thresholds = Thresholds()) -> list[Verdict] | None:
    paths = {p for c in table.cells.values() for p in c.values}
    s_path = staleness_path(paths)
    if s_path is None or OBJECTIVE_PATH not in paths:
        return None
    out = []
    for arm, by_point in arms(table, s_path).items():
        levels = sorted({s for s, _ in by_point if isinstance(s, (int, float))})
        if len(levels) < 2:
            continue
        for verdict in _arm_verdicts(table, by_point, levels[0], levels[-1], th, s_path):
            verdict.numbers.update({"staleness_path": s_path, "arm": arm})
            out.append(verdict)
    return out or None


def _arm_verdicts(
    table: StudyTable, by_point: dict[tuple, Cell], low, high, th: Thresholds, s_path: str
) -> list[Verdict]:
    objectives = {o for _, o in by_point}
    clip = next((o for o in CLIP_OBJECTIVES if o in objectives), None)
    on_policy = by_point.get((low, clip)) if clip else None
    stale_clip = by_point.get((high, clip)) if clip else None
    m2po, no_clip = by_point.get((high, "m2po")), by_point.get((high, "no_clip"))
    m2 = regime.m2_check(m2po or stale_clip, f"{'m2po' if m2po else clip} at {s_path}={high}", th)
    out = []

    if on_policy is None or stale_clip is None:
        out.append(_missing("a", f"clip objective ({'/'.join(CLIP_OBJECTIVES)}) at {s_path}={low} and {high}"))
    else:
        label = SUMMARY_LABELS.get(table.how, table.how)
        also = None if table.how == "mean" else ("the area under the curve", on_policy.area(), stale_clip.area())
        verdict = claims.stale_clip_below_on_policy(on_policy.estimate, stale_clip.estimate, th, label=label, also=also)
        out.append(
            within_regime(
                verdict, [regime.seeds_check([on_policy, stale_clip]), regime.movement_check(on_policy, th, REGIME)]
            )
        )
    if on_policy is None or m2po is None:
        out.append(_missing("b", f"on-policy clip or m2po at {s_path}={high}"))
    else:
        verdict = claims.m2po_matches_on_policy(on_policy.estimate, m2po.estimate, th)
        verdict.numbers["collapsed_seeds"] = m2po.collapsed(th.collapse_margin * th.reward_range)
        out.append(
            within_regime(
                verdict, [regime.seeds_check([on_policy, m2po]), regime.movement_check(on_policy, th, TESTABLE), m2]
            )
        )
    if m2po is None or stale_clip is None:
        out.append(_missing("c", f"m2po and clip at {s_path}={high}"))
    else:
        verdict = _mask_verdict(list(m2po.run_values), list(stale_clip.run_values), th)
        out.append(
            within_regime(
                verdict, [regime.seeds_check([m2po, stale_clip]), m2, regime.near_det_check([m2po, stale_clip], th)]
            )
        )
    if no_clip is None:
        out.append(_missing("d", f"no_clip at {s_path}={high}"))
    else:
        verdict = _collapse_verdict(no_clip, th)
        out.append(within_regime(verdict, [regime.seeds_check([no_clip]), regime.headroom_check(no_clip, th)]))
    for verdict in out:
        verdict.numbers.update({"low": low, "high": high, "clip_objective": clip})
    return out


def _seed_mean(values: dict[int, float]) -> float:
    finite = [v for v in values.values() if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def _mask_verdict(m2po_runs: list[int], clip_runs: list[int], th: Thresholds) -> Verdict:
    fractions = run_summaries(m2po_runs + clip_runs, FRACTION_KEY, "mean")
    m2po = _seed_mean({r: fractions[r] for r in m2po_runs if r in fractions})
    clip = _seed_mean({r: fractions[r] for r in clip_runs if r in fractions})
    verdict = claims.m2po_masks_fewer_than_clip_clips(m2po, clip, th)
    by_class = {}
    for name, key in CLASS_FRACTION_KEYS.items():
        values = run_summaries(m2po_runs + clip_runs, key, "mean")
        if values:
            by_class[name] = {
                "m2po": _seed_mean({r: values[r] for r in m2po_runs if r in values}),
                "clip": _seed_mean({r: values[r] for r in clip_runs if r in values}),
            }
    if by_class:
        verdict.numbers["by_class"] = by_class
        parts = [f"{name} tokens {v['m2po']:.2%} masked vs {v['clip']:.2%} clipped" for name, v in by_class.items()]
        verdict = Verdict(verdict.claim, verdict.status, f"{verdict.reason} ({'; '.join(parts)})", verdict.numbers)
    return verdict


def _collapse_verdict(no_clip: Cell, th: Thresholds) -> Verdict:
    shapes = list(no_clip.shapes.values())
    return claims.no_clip_collapses(
        [s.peak for s in shapes], [s.tail for s in shapes], any(s.non_finite for s in shapes), th
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


THRESHOLD_FIELDS = ("gap", "mask_ratio", "collapse_margin", "reward_range", "m2_regime", "near_det_min")

__all__ = ["study_verdicts", "thresholds_from", "smoothed_peak", "cell_key"]
