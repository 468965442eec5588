"""Regime checks: the measured quantities that decide whether a claim of the paper can be tested on
a sweep at all, for any sweep over staleness x objective (the preset's or a user's).

The paper's regime is an LLM's at lr 1e-6: most tokens near-deterministic, M2 before masking near
tau at s = 256, the reward moving over thousands of updates. A toy can sit far from it, and then a
claim that fails says nothing about the paper (docs/study-notes.md has the calibration). Each check
is computed from what the runs logged:

- m2 (regime): M2 before masking (`actor/m2`, the mean (log r)^2 over trust-region tokens, which
  every objective logs), the median over a run's updates (the typical update, as the paper's "M2
  mostly sits below tau"), the mean over seeds, at the highest staleness: m2po's cell, else the
  clip cell's. Passed when at most `m2_regime` x tau (tau: the runs' algorithm.tau_m2).
- near_det (regime): `actor/near_det_frac`, the fraction of tokens whose entropy is below 0.1 nats,
  the mean over the run and the seeds of the cells the claim compares; passed when at least
  `near_det_min`.
- movement (testable for (b), regime for (a)): on-policy's reward movement, tail mean minus the mean
  over the first 10% of updates, mean over seeds; passed when at least the gap that counts as a
  difference. If on-policy does not move, "M2PO matches it" is vacuous, and stale clip can trail it
  only by collapsing.
- headroom (regime, (d)): stale no-clip's tail is more than `collapse_margin` below the reward's
  ceiling (`reward_range`): a policy at the ceiling has zero advantages (every group equal) and no
  gradient left to collapse with.
- seeds: the fewest seeds of the cells compared; fewer than two give no interval (inconclusive).

A check whose key no run logged is "not measured" and blocks nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from orchestrator.experiments.models import Run
from orchestrator.metrics.chunks import live_points
from orchestrator.studies.claims import REGIME, TESTABLE, RegimeCheck, Thresholds
from orchestrator.studies.table import Cell
from trainer.config import AlgorithmConfig

M2_KEY = "actor/m2"
NEAR_DET_KEY = "actor/near_det_frac"
DEFAULT_TAU = AlgorithmConfig.model_fields["tau_m2"].default


def _per_run(run_ids: list[int], key: str, reduce) -> dict[int, float]:
    out = {}
    for (rid, _), pts in live_points(run_ids, [key]).items():
        finite = pts.values[pts.specials == 0]
        if finite.size:
            out[rid] = float(reduce(finite))
    return out


def _seed_mean(values: Iterable[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return float(np.mean(finite)) if finite else None


def run_taus(run_ids: list[int]) -> list[float]:
    taus = Run.objects.filter(pk__in=run_ids).values_list("config__algorithm__tau_m2", flat=True)
    return [float(t) if t is not None else DEFAULT_TAU for t in taus]


def m2_check(cell: Cell | None, label: str, th: Thresholds) -> RegimeCheck:
    """M2 before masking of `cell` (a cell at the highest staleness) against the runs' tau."""
    runs = list(cell.shapes) if cell is not None else []
    m2 = _seed_mean(_per_run(runs, M2_KEY, np.median).values()) if runs else None
    if m2 is None:
        return RegimeCheck("m2", "M2 before masking: not measured (no actor/m2)", None)
    tau = max(run_taus(runs))
    ok = m2 <= th.m2_regime * tau
    return RegimeCheck(
        "m2",
        f"M2 before masking ({label}, median update) is {m2:.3g} = {m2 / tau:.2g}x tau, "
        f"{'within' if ok else 'above'} the paper's regime of at most {th.m2_regime:g}x tau",
        ok,
        REGIME,
        m2,
        th.m2_regime * tau,
    )


def near_det_check(cells: list[Cell | None], th: Thresholds) -> RegimeCheck:
    runs = [rid for c in cells if c is not None for rid in c.shapes]
    frac = _seed_mean(_per_run(runs, NEAR_DET_KEY, np.mean).values()) if runs else None
    if frac is None:
        return RegimeCheck("near_det", "near-deterministic tokens: not measured (no actor/near_det_frac)", None)
    ok = frac >= th.near_det_min
    return RegimeCheck(
        "near_det",
        f"{frac:.0%} of tokens near-deterministic (entropy < 0.1 nats; the paper's regime: "
        f"at least {th.near_det_min:.0%})",
        ok,
        REGIME,
        frac,
        th.near_det_min,
    )


def movement_check(on_policy: Cell | None, th: Thresholds, kind: str) -> RegimeCheck:
    moves = [s.movement for s in on_policy.shapes.values()] if on_policy is not None else []
    moved = _seed_mean(moves)
    if moved is None:
        return RegimeCheck("movement", "on-policy reward movement: not measured", None, kind)
    need = th.gap * th.reward_range
    ok = moved >= need
    return RegimeCheck(
        "movement",
        f"on-policy's reward moves {moved:+.3g} over the run (tail minus first 10%; "
        f"at least {need:.3g} needed to tell a difference)",
        ok,
        kind,
        moved,
        need,
    )


def headroom_check(no_clip: Cell | None, th: Thresholds) -> RegimeCheck:
    tail = _seed_mean(s.tail for s in no_clip.shapes.values()) if no_clip is not None else None
    if tail is None:
        return RegimeCheck("headroom", "no-clip's tail: not measured", None)
    room = th.reward_range - tail
    ok = room > th.collapse_margin * th.reward_range
    text = f"no-clip's tail {tail:.3g} is {room:.3g} below the ceiling {th.reward_range:g}" + (
        "" if ok else ": it saturates, with zero advantages and no gradient left to collapse with"
    )
    return RegimeCheck("headroom", text, ok, REGIME, room, th.collapse_margin * th.reward_range)


def seeds_check(cells: list[Cell | None]) -> RegimeCheck:
    present = [c for c in cells if c is not None]
    if not present:
        return RegimeCheck("seeds", "seeds: no cell", None, TESTABLE)
    fewest = min(len(c.run_values) for c in present)
    return RegimeCheck(
        "seeds",
        f"{fewest} seeds in the fewest cell compared (at least 2 for an interval)",
        fewest >= 2,
        TESTABLE,
        float(fewest),
        2.0,
    )
