"""The four claims of the paper judged on one sweep over staleness x objective.

Which cells answer which claim:
- on-policy: the clip objective (grpo, else another clip objective in the sweep) at the lowest
  swept staleness;
- (a) the same clip objective at the highest staleness against on-policy, on the study metric;
- (b) m2po at the highest staleness against on-policy;
- (c) the mean over the run of `actor/clip_frac` (masked tokens for m2po, clipped tokens for the
  clip objectives), averaged over seeds, m2po against clip at the highest staleness;
- (d) no_clip at the highest staleness: per seed, the peak of its smoothed curve against its tail
  mean, and whether any training value turned non-finite.
A sweep without both a staleness field and algorithm.objective gets no verdicts, and a claim
whose cells are missing is inconclusive and says which cell is missing.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from orchestrator.metrics.chunks import live_points
from orchestrator.studies import claims
from orchestrator.studies.claims import INCONCLUSIVE, Thresholds, Verdict
from orchestrator.studies.statistics import summarize
from orchestrator.studies.table import OBJECTIVE_PATH, StudyTable, cell_key, run_summaries, staleness_path

CLIP_OBJECTIVES = ("grpo", "decoupled_ppo", "gspo")
FRACTION_KEY = "actor/clip_frac"
NON_FINITE_KEYS = ("actor/pg_loss", "actor/grad_norm")
SMOOTHING_FRACTION = 0.05  # moving-average window for the peak in (d), as a fraction of the points


def smoothed_peak(values: np.ndarray) -> float:
    """The highest moving average (window: 5% of the points, at least 1) of a curve."""
    if values.size == 0:
        return math.nan
    window = max(1, int(round(values.size * SMOOTHING_FRACTION)))
    if window >= values.size:
        return float(np.mean(values))
    kernel = np.ones(window) / window
    return float(np.max(np.convolve(values, kernel, mode="valid")))


def _missing(claim: str, what: str) -> Verdict:
    return Verdict(claim, INCONCLUSIVE, f"the sweep has no {what} cell", {})


def study_verdicts(table: StudyTable, th: Thresholds = Thresholds()) -> list[Verdict] | None:
    paths = {p for c in table.cells.values() for p in c.values}
    s_path = staleness_path(paths)
    if s_path is None or OBJECTIVE_PATH not in paths:
        return None
    by_point = {(c.values.get(s_path), c.values.get(OBJECTIVE_PATH)): c for c in table.cells.values()}
    levels = sorted({s for s, _ in by_point if isinstance(s, (int, float))})
    objectives = {o for _, o in by_point}
    if len(levels) < 2:
        return None
    low, high = levels[0], levels[-1]
    clip = next((o for o in CLIP_OBJECTIVES if o in objectives), None)

    def cell(objective, level):
        return by_point.get((level, objective))

    on_policy = cell(clip, low) if clip else None
    out = []
    stale_clip = cell(clip, high) if clip else None
    if on_policy is None or stale_clip is None:
        out.append(_missing("a", f"clip objective ({'/'.join(CLIP_OBJECTIVES)}) at staleness {low} and {high}"))
    else:
        out.append(claims.stale_clip_below_on_policy(on_policy.estimate, stale_clip.estimate, th))
    m2po = cell("m2po", high)
    if on_policy is None or m2po is None:
        out.append(_missing("b", f"on-policy clip or m2po at staleness {high}"))
    else:
        out.append(claims.m2po_matches_on_policy(on_policy.estimate, m2po.estimate, th))
    if m2po is None or stale_clip is None:
        out.append(_missing("c", f"m2po and clip at staleness {high}"))
    else:
        out.append(_mask_verdict(list(m2po.run_values), list(stale_clip.run_values), th))
    no_clip = cell("no_clip", high)
    if no_clip is None:
        out.append(_missing("d", f"no_clip at staleness {high}"))
    else:
        out.append(_collapse_verdict(list(no_clip.run_values), table.metric, th))
    for verdict in out:
        verdict.numbers.update({"staleness_path": s_path, "low": low, "high": high, "clip_objective": clip})
    return out


def _seed_mean(values: dict[int, float]) -> float:
    finite = [v for v in values.values() if math.isfinite(v)]
    return float(np.mean(finite)) if finite else math.nan


def _mask_verdict(m2po_runs: list[int], clip_runs: list[int], th: Thresholds) -> Verdict:
    fractions = run_summaries(m2po_runs + clip_runs, FRACTION_KEY, "mean")
    m2po = _seed_mean({r: fractions[r] for r in m2po_runs if r in fractions})
    clip = _seed_mean({r: fractions[r] for r in clip_runs if r in fractions})
    return claims.m2po_masks_fewer_than_clip_clips(m2po, clip, th)


def _collapse_verdict(run_ids: list[int], metric: str, th: Thresholds) -> Verdict:
    curves = live_points(run_ids, [metric, *NON_FINITE_KEYS])
    non_finite = any(bool((pts.specials != 0).any()) for pts in curves.values())
    peaks, tails = [], []
    for rid in run_ids:
        pts = curves.get((rid, metric))
        if pts is None:
            continue
        finite = pts.specials == 0
        peaks.append(smoothed_peak(pts.values[finite]))
        tails.append(summarize(pts.steps[finite], pts.values[finite], "tail_mean"))
    return claims.no_clip_collapses(peaks, tails, non_finite, th)


def thresholds_from(params: Any) -> tuple[Thresholds, list[dict[str, str]]]:
    """Thresholds from query parameters (gap, mask_ratio, collapse_margin, reward_range), each a
    positive number; errors name the parameter, and its default stays."""
    defaults = Thresholds()
    values, errors = {}, []
    for name in ("gap", "mask_ratio", "collapse_margin", "reward_range"):
        raw = (params.get(name) or "").strip()
        if not raw:
            continue
        try:
            value = float(raw) if len(raw) <= 32 else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            errors.append({"field": name, "message": f"must be a positive number (got {raw[:32]!r}); using {getattr(defaults, name)}"})
            continue
        values[name] = value
    return Thresholds(**values), errors


__all__ = ["study_verdicts", "thresholds_from", "smoothed_peak", "cell_key"]
