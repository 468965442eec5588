"""The claims' tests on a table of runs (studies/run_table.py): the one place verdicts are made, for
the experiment page, `study_report` and `study_verdicts` alike.

Cells: on-policy is the clip objective (grpo, else ppo, decoupled_ppo, gspo) at the lowest staleness;
the stale cells are each objective at the highest. Runs pair across cells by (warm-up, seed).

- (a) on-policy minus stale clip on `tail`: its 95% t interval (paired where the units match)
  above `margin_a` is reproduced, below it not reproduced, across it inconclusive.
- (b) TOST of stale M2PO against on-policy at ±`equivalence_margin` (the 90% interval inside the
  margin): equivalent is reproduced; a difference whose estimate lies outside the margin is not
  reproduced; an estimate inside the margin with an interval too wide to show it is inconclusive.
  The same test on stale no-clip is the negative control: when it passes too, the verdict says
  that the mask is not what the study shows.
- (c) mean masked fraction of stale M2PO over mean clipped fraction of stale clip, both after the
  ramp, at most `mask_ratio`; whole-run fractions beside them when given.
- (d) stale no-clip: inconclusive unless every run goes past `collapse_horizon` updates after the
  ramp; then reproduced when a majority collapsed.

Regime checks (each a `RegimeCheck`, symmetric, see claims.within_regime): seeds (≥ 2), run length
(every stale run at least `run_length` x its staleness in updates), M2 (the median over the stale
M2PO runs of their median M2 before masking after the ramp, at most `m2_regime` x tau; the stale
clip runs' without M2PO), on-policy's reward movement ((a), (b)), near-deterministic tokens ((c)),
no-clip's headroom below the ceiling ((d)), and S·η within the staleness-learning-rate budget the
sweep measured ((a)-(c); studies/budget.py: unmeasured, so blocking nothing, until a run collapsed).
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from orchestrator.studies.budget import Budget, budget_check, fit_budget
from orchestrator.studies.claims import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    TESTABLE,
    RegimeCheck,
    Thresholds,
    Verdict,
    within_regime,
)
from orchestrator.studies.run_table import RunRow
from orchestrator.studies.statistics import difference_of_means, equivalence, warmup_spread

CLIP_OBJECTIVES = ("grpo", "ppo", "decoupled_ppo", "gspo")  # "ppo": a table from another trainer
CLAIMS = ("a", "b", "c", "d")


def _cells(rows: list[RunRow]) -> dict[tuple[int, str], list[RunRow]]:
    out: dict[tuple[int, str], list[RunRow]] = defaultdict(list)
    for r in rows:
        out[(r.staleness, r.objective)].append(r)
    return out


def _by_unit(rows: list[RunRow], attr: str = "tail") -> dict:
    return {r.unit: getattr(r, attr) for r in rows if math.isfinite(getattr(r, attr))}


def _mean(values) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(finite)) if finite else None


def _spread(*cells: list[RunRow]) -> dict:
    """Between-warm-up spread beside the seed spread, of each cell's tails."""
    out = {}
    for cell in cells:
        groups: dict[str, list[float]] = defaultdict(list)
        for r in cell:
            groups[r.warmup].append(r.tail)
        if cell:
            out[f"{cell[0].objective}@{cell[0].staleness}"] = warmup_spread(groups).as_dict()
    return out


# --- regime checks ------------------------------------------------------------------------------


def seeds_check(*cells: list[RunRow]) -> RegimeCheck:
    fewest = min(len(c) for c in cells)
    return RegimeCheck(
        "seeds",
        f"{fewest} runs in the fewest cell compared (at least 2 for an interval)",
        fewest >= 2,
        TESTABLE,
        float(fewest),
        2.0,
    )


def run_length_check(stale: list[RunRow], th: Thresholds) -> RegimeCheck:
    s = max((r.staleness for r in stale), default=0)
    lengths = [r.length for r in stale if math.isfinite(r.length)]
    if not lengths or s == 0:
        return RegimeCheck("run_length", "run length: not measured", None)
    shortest = min(lengths)
    need = th.run_length * s
    ok = shortest >= need
    return RegimeCheck(
        "run_length",
        f"the shortest stale run lasts {shortest:.0f} updates = {shortest / s:.2g}x its staleness {s} "
        f"(at least {th.run_length:g}x: a run must outlast its staleness for the stale data to matter)",
        ok,
        value=shortest,
        limit=need,
    )


def m2_check(cell: list[RunRow], label: str, th: Thresholds) -> RegimeCheck:
    values = [r.m2_median_over_tau for r in cell if math.isfinite(r.m2_median_over_tau)]
    if not values:
        return RegimeCheck("m2", "M2 before masking: not measured", None)
    m2 = float(np.median(values))
    ok = m2 <= th.m2_regime
    return RegimeCheck(
        "m2",
        f"median M2 before masking after the ramp ({label}) is {m2:.2g}x tau, "
        f"{'within' if ok else 'above'} the paper's regime of at most {th.m2_regime:g}x tau",
        ok,
        value=m2,
        limit=th.m2_regime,
    )


def movement_check(on_policy: list[RunRow], th: Thresholds) -> RegimeCheck:
    moved = _mean(r.reward_movement for r in on_policy)
    if moved is None:
        return RegimeCheck("movement", "on-policy reward movement: not measured", None)
    ok = moved >= th.movement_min * th.reward_range
    return RegimeCheck(
        "movement",
        f"on-policy's reward moves {moved:+.3g} over the run (tail minus first 10%; at least "
        f"{th.movement_min * th.reward_range:.3g} for a match or a lag to mean anything)",
        ok,
        value=moved,
        limit=th.movement_min * th.reward_range,
    )


def near_det_check(cells: list[RunRow], th: Thresholds) -> RegimeCheck:
    frac = _mean(r.near_deterministic_fraction for r in cells)
    if frac is None:
        return RegimeCheck("near_det", "near-deterministic tokens: not measured", None)
    ok = frac >= th.near_det_min
    return RegimeCheck(
        "near_det",
        f"{frac:.0%} of tokens near-deterministic (entropy < 0.1 nats; the paper's regime: at least "
        f"{th.near_det_min:.0%})",
        ok,
        value=frac,
        limit=th.near_det_min,
    )


def headroom_check(no_clip: list[RunRow], th: Thresholds) -> RegimeCheck:
    tail = _mean(r.tail for r in no_clip)
    if tail is None:
        return RegimeCheck("headroom", "no-clip's tail: not measured", None)
    room = th.reward_range - tail
    ok = room > th.collapse_margin * th.reward_range
    text = f"no-clip's tail {tail:.3g} is {room:.3g} below the ceiling {th.reward_range:g}" + (
        "" if ok else ": it saturates, with zero advantages and no gradient left to collapse with"
    )
    return RegimeCheck("headroom", text, ok, value=room, limit=th.collapse_margin * th.reward_range)


# --- the four tests -----------------------------------------------------------------------------


def _interval(e) -> str:
    return f"{e.mean:+.3g} [{e.low:+.3g}, {e.high:+.3g}]"


def stale_clip_below(on_policy: list[RunRow], stale_clip: list[RunRow], th: Thresholds) -> Verdict:
    diff = difference_of_means(_by_unit(on_policy), _by_unit(stale_clip))
    e, margin = diff.estimate, th.margin_a * th.reward_range
    how = "paired by warm-up and seed" if diff.paired else "Welch, unpaired"
    numbers = {"test": "95% t interval of on-policy minus stale clip above the margin", "summary": "tail"}
    numbers.update({"difference": diff.as_dict(), "margin": margin, "spread": _spread(on_policy, stale_clip)})
    if not e.has_interval:
        return Verdict("a", INCONCLUSIVE, "too few runs for an interval of the difference", numbers)
    text = f"on-policy minus stale clip on the tail is {_interval(e)} (95% t interval, {how})"
    if e.low > margin:
        return Verdict("a", REPRODUCED, f"{text}, above the {margin:.3g} margin", numbers)
    if e.high < margin:
        return Verdict("a", NOT_REPRODUCED, f"{text}, below the {margin:.3g} margin", numbers)
    return Verdict("a", INCONCLUSIVE, f"{text}, across the {margin:.3g} margin", numbers)


def _tost_text(name: str, equal: bool | None, diff, margin: float) -> str:
    e = diff.estimate
    return (
        f"{name} minus on-policy {_interval(e)} (90% t interval, "
        f"{'paired' if diff.paired else 'Welch'}) {'inside' if equal else 'not inside'} ±{margin:.3g}"
    )


def m2po_matches(on_policy: list[RunRow], m2po: list[RunRow], no_clip: list[RunRow] | None, th: Thresholds) -> Verdict:
    margin = th.equivalence_margin * th.reward_range
    equal, diff = equivalence(_by_unit(m2po), _by_unit(on_policy), margin)
    numbers: dict = {
        "test": f"TOST (alpha 0.05) of M2PO against on-policy at ±{margin:.3g}",
        "difference": diff.as_dict(),
        "margin": margin,
        "collapsed_seeds": sum(bool(r.collapsed) for r in m2po),
        "spread": _spread(on_policy, m2po),
    }
    control_text = ""
    if no_clip:
        control, control_diff = equivalence(_by_unit(no_clip), _by_unit(on_policy), margin)
        numbers["control"] = {"objective": "no_clip", "equivalent": control, "difference": control_diff.as_dict()}
        if control is not None:
            control_text = "; negative control: " + _tost_text("no-clip", control, control_diff, margin)
            if control:
                control_text += (
                    ": no-clip at the same staleness matches on-policy too, so staleness did not hurt "
                    "here and the mask is not what the study shows"
                )
    else:
        numbers["control"] = None
        control_text = "; no no-clip control at this staleness"
    if equal is None:
        return Verdict("b", INCONCLUSIVE, "too few runs for an interval of the difference" + control_text, numbers)
    text = _tost_text("M2PO", equal, diff, margin)
    if equal:
        return Verdict("b", REPRODUCED, f"equivalent: {text}{control_text}", numbers)
    if abs(diff.estimate.mean) > margin:
        return Verdict("b", NOT_REPRODUCED, f"not equivalent: {text}{control_text}", numbers)
    return Verdict("b", INCONCLUSIVE, f"too imprecise to show equivalence: {text}{control_text}", numbers)


def _fraction_text(m2po: float | None, clip: float | None) -> str:
    if m2po is None or clip is None:
        return ""
    return f"{m2po:.3%} masked vs {clip:.3%} clipped"


def masks_fewer(m2po: list[RunRow], clip: list[RunRow], th: Thresholds) -> Verdict:
    masked, clipped = _mean(r.masked_fraction for r in m2po), _mean(r.clipped_fraction for r in clip)
    whole = (
        _mean(r.masked_fraction_whole_run for r in m2po),
        _mean(r.clipped_fraction_whole_run for r in clip),
    )
    numbers = {
        "test": "mean masked fraction over mean clipped fraction, after the ramp",
        "masked_fraction": masked,
        "clipped_fraction": clipped,
        "masked_fraction_whole_run": whole[0],
        "clipped_fraction_whole_run": whole[1],
        "max_ratio": th.mask_ratio,
    }
    beside = ""
    if whole[0] is not None and whole[1] is not None and whole[1] > 0:
        beside = f" (whole run: {_fraction_text(*whole)}, {whole[0] / whole[1]:.2g}x)"
    if masked is None or clipped is None:
        return Verdict("c", INCONCLUSIVE, "a masked or clipped fraction is not measured", numbers)
    if clipped <= 0:
        return Verdict("c", INCONCLUSIVE, "clip clipped nothing after the ramp: nothing to compare", numbers)
    ratio = masked / clipped
    numbers["ratio"] = ratio
    text = f"after the ramp M2PO {_fraction_text(masked, clipped)} by clip, {ratio:.2g}x{beside}"
    if ratio <= th.mask_ratio:
        return Verdict("c", REPRODUCED, f"{text}, at most {th.mask_ratio:g}x", numbers)
    return Verdict("c", NOT_REPRODUCED, f"{text}, more than the {th.mask_ratio:g}x wanted", numbers)


def no_clip_collapses(no_clip: list[RunRow], th: Thresholds) -> Verdict:
    after = [r.updates_after_ramp for r in no_clip]
    fell = sum(bool(r.collapsed) for r in no_clip)
    numbers = {
        "test": f"a majority of no-clip runs collapse, judged past {th.collapse_horizon:g} updates after the ramp",
        "collapsed": fell,
        "runs": len(no_clip),
        "updates_after_ramp_min": min(after) if after else None,
        "horizon": th.collapse_horizon,
    }
    shortest = min((a for a in after if math.isfinite(a)), default=None)
    if shortest is None or shortest < th.collapse_horizon:
        ran = "not measured" if shortest is None else f"{shortest:.0f} updates after the ramp"
        return Verdict(
            "d",
            INCONCLUSIVE,
            f"the run is shorter than the collapse horizon: {ran}, against {th.collapse_horizon:g} "
            f"(the paper's no-clip collapses after about 850-1,650 updates); {fell} of {len(no_clip)} collapsed",
            numbers,
        )
    if fell * 2 > len(no_clip):
        return Verdict("d", REPRODUCED, f"{fell} of {len(no_clip)} no-clip runs collapsed", numbers)
    return Verdict(
        "d", NOT_REPRODUCED, f"only {fell} of {len(no_clip)} no-clip runs collapsed (stagnation, not collapse)", numbers
    )


def _missing(claim: str, what: str) -> Verdict:
    return Verdict(claim, INCONCLUSIVE, f"the study has no {what} runs", {})


def judge(
    rows: list[RunRow], th: Thresholds = Thresholds(), extra_checks: dict | None = None, budget: Budget | None = None
) -> list[Verdict]:
    """The four verdicts on one arm's runs (one learning rate, one set of other settings).
    extra_checks: claim -> more RegimeChecks. budget: the staleness-learning-rate budget the whole
    sweep measured (all its arms); None: fitted from these rows alone."""
    cells = _cells(rows)
    budget_ok = budget_check(rows, budget if budget is not None else fit_budget(rows))
    levels = sorted({s for s, _ in cells})
    low, high = (levels[0], levels[-1]) if levels else (0, 0)
    objectives = {o for _, o in cells}
    clip = next((o for o in CLIP_OBJECTIVES if o in objectives), None)
    on_policy = cells.get((low, clip), []) if clip else []
    stale_clip = cells.get((high, clip), []) if clip and high != low else []
    m2po = cells.get((high, "m2po"), []) if high != low else []
    no_clip = cells.get((high, "no_clip"), []) if high != low else []
    m2 = m2_check(m2po or stale_clip, f"{'m2po' if m2po else clip} at staleness {high}", th)
    extra = {c: [budget_ok] + (extra_checks or {}).get(c, []) for c in "abc"}
    out = []
    if on_policy and stale_clip:
        checks = [
            seeds_check(on_policy, stale_clip),
            run_length_check(stale_clip, th),
            movement_check(on_policy, th),
            m2,
        ]
        out.append(within_regime(stale_clip_below(on_policy, stale_clip, th), checks + extra.get("a", [])))
    else:
        out.append(_missing("a", f"clip ({'/'.join(CLIP_OBJECTIVES)}) at the lowest and the highest staleness"))
    if on_policy and m2po:
        checks = [seeds_check(on_policy, m2po), run_length_check(m2po, th), movement_check(on_policy, th), m2]
        out.append(within_regime(m2po_matches(on_policy, m2po, no_clip, th), checks + extra.get("b", [])))
    else:
        out.append(_missing("b", "on-policy clip or stale m2po"))
    if m2po and stale_clip:
        checks = [
            seeds_check(m2po, stale_clip),
            run_length_check(m2po + stale_clip, th),
            m2,
            near_det_check(m2po + stale_clip, th),
        ]
        out.append(within_regime(masks_fewer(m2po, stale_clip, th), checks + extra.get("c", [])))
    else:
        out.append(_missing("c", "stale m2po and stale clip"))
    if no_clip:
        checks = [seeds_check(no_clip), run_length_check(no_clip, th), headroom_check(no_clip, th)]
        out.append(within_regime(no_clip_collapses(no_clip, th), checks + (extra_checks or {}).get("d", [])))
    else:
        out.append(_missing("d", "stale no_clip"))
    for v in out:
        v.numbers.update({"low": low, "high": high, "clip_objective": clip})
    return out


def arms_of(rows: list[RunRow]) -> dict[str, list[RunRow]]:
    """A table's runs by learning rate ("" when it has one): each lr is judged on its own."""
    lrs = sorted({r.lr for r in rows if math.isfinite(r.lr)})
    if len(lrs) <= 1:
        return {"": rows}
    return {f"lr={lr:g}": [r for r in rows if r.lr == lr] for lr in lrs}


def verdict_json(v: Verdict) -> dict:
    return {
        "verdict": v.status,
        "reason": v.reason,
        "measured": v.numbers,
        "regime": [c.as_dict() for c in v.checks],
    }


def claims_json(verdicts: list[Verdict]) -> dict:
    return {v.claim: verdict_json(v) for v in verdicts}
