"""Verdicts on the paper's four staleness claims, from seed statistics, with explicit thresholds.

(a) stale clip (PPO/GRPO) ends clearly below on-policy;
(b) M2PO at high staleness matches on-policy;
(c) M2PO masks far fewer tokens than clip clips (paper: 0.06% vs 1.22%);
(d) no-clip at high staleness collapses: its tail falls below its own peak, or turns non-finite.

Each verdict is "reproduced", "not reproduced", "inconclusive" or "outside the paper's regime",
with the measured numbers and a reason a person can check. An honest "not reproduced" is a result;
the wording never says more than the numbers do.

Regime checks (`RegimeCheck`, measured by studies/regime.py) say whether a claim can be tested on
the sweep at all: M2 before masking against tau at the highest staleness, the fraction of
near-deterministic tokens, the reward's movement over the run, headroom below the reward's ceiling,
and the number of seeds. `within_regime` attaches them to a verdict: a check the claim needs in
order to be tested at all ("testable") that fails makes any verdict "outside the paper's regime";
a check that only says whether the sweep is in the paper's regime ("regime") turns a failure to
reproduce into "outside the paper's regime" (a claim that holds outside the regime stays
reproduced). Too few seeds (fewer than 2) make any verdict inconclusive. "Not reproduced" is then
left only where every check passed, and an unmeasured check (a key the runs never logged) blocks
nothing but is listed as not measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from orchestrator.studies.statistics import Estimate

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
OUTSIDE_REGIME = "outside the paper's regime"
STATUSES = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, OUTSIDE_REGIME)
TESTABLE, REGIME = "testable", "regime"  # what a failed check means (see the module docstring)


@dataclass(frozen=True)
class Thresholds:
    gap: float = 0.1  # (a): on-policy - stale clip, as a fraction of the reward range
    mask_ratio: float = 0.1  # (c): M2PO's mask fraction at most this times clip's clip fraction
    collapse_margin: float = 0.1  # (d): tail below peak by this fraction of the reward range
    reward_range: float = 1.0  # rewards in [0, 1] unless told otherwise
    m2_regime: float = 4.0  # M2 before masking at the highest staleness at most this many times tau
    near_det_min: float = 0.5  # at least this fraction of the tokens near-deterministic


@dataclass(frozen=True)
class RegimeCheck:
    """One measured quantity that decides whether a claim can be tested on this sweep."""

    name: str  # "m2", "near_det", "movement", "headroom", "seeds"
    text: str  # what was measured and against what, for a person
    passed: bool | None  # None: not measured (the runs did not log what it needs)
    kind: str = REGIME  # TESTABLE or REGIME
    value: float | None = None
    limit: float | None = None

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "text": self.text,
            "passed": self.passed,
            "kind": self.kind,
            "value": self.value,
            "limit": self.limit,
        }


@dataclass(frozen=True)
class Verdict:
    claim: str
    status: str
    reason: str
    numbers: dict = field(default_factory=dict)
    checks: tuple[RegimeCheck, ...] = ()


def within_regime(verdict: Verdict, checks: list[RegimeCheck]) -> Verdict:
    """The verdict with its regime checks attached, and "outside the paper's regime" where a
    failed check means the claim was not tested (the module docstring says which)."""
    checks = tuple(checks)
    seeds = next((c for c in checks if c.name == "seeds"), None)
    if seeds is not None and seeds.passed is False:  # too few seeds: nothing else can be judged
        reason = (
            verdict.reason
            if verdict.status == INCONCLUSIVE
            else f"{seeds.text}. As measured: {verdict.status}, {verdict.reason}"
        )
        return Verdict(verdict.claim, INCONCLUSIVE, reason, verdict.numbers, checks)
    failed = [c for c in checks if c.passed is False and c.name != "seeds"]
    blocking = [c for c in failed if c.kind == TESTABLE or verdict.status != REPRODUCED]
    if not blocking:
        return replace(verdict, checks=checks)
    reason = "; ".join(c.text for c in blocking) + f". As measured: {verdict.status}, {verdict.reason}"
    return Verdict(
        verdict.claim, OUTSIDE_REGIME, reason, {**verdict.numbers, "measured_status": verdict.status}, checks
    )


def _too_few(*estimates: Estimate) -> str | None:
    fewest = min(e.n for e in estimates)
    return f"too few seeds ({fewest}); at least 2 are needed for an interval" if fewest < 2 else None


def _gap(label: str, on_policy: Estimate, stale_clip: Estimate, need: float) -> tuple[str, str]:
    gap = on_policy.mean - stale_clip.mean
    if gap < need:
        apart = (
            " (the 95% CIs are apart)"
            if on_policy.has_interval and stale_clip.has_interval and not stale_clip.overlaps(on_policy)
            else ""
        )
        return (
            NOT_REPRODUCED,
            f"on {label} stale clip is {gap:.3g} below on-policy{apart}, less than the {need:.3g} required",
        )
    if stale_clip.high >= on_policy.low:
        return INCONCLUSIVE, f"on {label} the gap is {gap:.3g} but the 95% CIs overlap"
    return REPRODUCED, f"on {label} stale clip is {gap:.3g} below on-policy and the 95% CIs are apart"


def stale_clip_below_on_policy(
    on_policy: Estimate,
    stale_clip: Estimate,
    th: Thresholds = Thresholds(),
    label: str = "the tail",
    also: tuple[str, Estimate, Estimate] | None = None,
) -> Verdict:
    """Judged on the study's summary (`label`) and, when given, on a second one (`also`: label,
    on-policy, stale clip; the verdicts pass the area under the curve, since a task that saturates
    hides a slower learner in the tail). Reproduced when either shows the gap with CIs apart; the
    reason names which."""
    need = th.gap * th.reward_range
    numbers = {
        "on_policy": on_policy.as_dict(),
        "stale_clip": stale_clip.as_dict(),
        "gap": on_policy.mean - stale_clip.mean,
        "needed_gap": need,
        "measure": label,
    }
    if also is not None:
        numbers.update(
            {
                "also_measure": also[0],
                "also_on_policy": also[1].as_dict(),
                "also_stale_clip": also[2].as_dict(),
                "also_gap": also[1].mean - also[2].mean,
            }
        )
    if few := _too_few(on_policy, stale_clip):
        return Verdict("a", INCONCLUSIVE, few, numbers)
    results = [_gap(label, on_policy, stale_clip, need)]
    if also is not None and not _too_few(also[1], also[2]):
        results.append(_gap(*also, need))
    statuses = [status for status, _ in results]
    status = REPRODUCED if REPRODUCED in statuses else INCONCLUSIVE if INCONCLUSIVE in statuses else NOT_REPRODUCED
    first = next(i for i, st in enumerate(statuses) if st == status)
    ordered = [results[first]] + [r for i, r in enumerate(results) if i != first]
    return Verdict("a", status, "; ".join(text for _, text in ordered), numbers)


def m2po_matches_on_policy(on_policy: Estimate, stale_m2po: Estimate, th: Thresholds = Thresholds()) -> Verdict:
    numbers = {
        "on_policy": on_policy.as_dict(),
        "stale_m2po": stale_m2po.as_dict(),
        "difference": stale_m2po.mean - on_policy.mean,
    }
    if few := _too_few(on_policy, stale_m2po):
        return Verdict("b", INCONCLUSIVE, few, numbers)
    if stale_m2po.overlaps(on_policy):
        widest = max(stale_m2po.high - stale_m2po.low, on_policy.high - on_policy.low)
        if widest > 2 * th.gap * th.reward_range:  # overlap of wide intervals says little
            return Verdict(
                "b",
                INCONCLUSIVE,
                f"the CIs overlap but one is {widest:.3g} wide, more than twice the "
                f"{th.gap * th.reward_range:.3g} gap that counts as a difference",
                numbers,
            )
        return Verdict("b", REPRODUCED, "M2PO's 95% CI overlaps on-policy's", numbers)
    if stale_m2po.low > on_policy.high:
        return Verdict("b", REPRODUCED, "M2PO ends above on-policy, CIs apart", numbers)
    return Verdict(
        "b", NOT_REPRODUCED, f"M2PO ends {on_policy.mean - stale_m2po.mean:.3g} below on-policy, CIs apart", numbers
    )


def m2po_masks_fewer_than_clip_clips(
    m2po_mask_frac: float, clip_clip_frac: float, th: Thresholds = Thresholds()
) -> Verdict:
    numbers = {"m2po_mask_frac": m2po_mask_frac, "clip_clip_frac": clip_clip_frac, "max_ratio": th.mask_ratio}
    if math.isnan(m2po_mask_frac) or math.isnan(clip_clip_frac):
        return Verdict("c", INCONCLUSIVE, "a mask or clip fraction is missing", numbers)
    if clip_clip_frac <= 0:
        return Verdict(
            "c", INCONCLUSIVE, "clip clipped nothing at this staleness, so there is nothing to compare", numbers
        )
    ratio = m2po_mask_frac / clip_clip_frac
    numbers["ratio"] = ratio
    if ratio <= th.mask_ratio:
        return Verdict(
            "c",
            REPRODUCED,
            f"M2PO masks {m2po_mask_frac:.3%} of tokens, {ratio:.2g}x clip's {clip_clip_frac:.3%}",
            numbers,
        )
    return Verdict(
        "c",
        NOT_REPRODUCED,
        f"M2PO masks {m2po_mask_frac:.3%}, {ratio:.2g}x clip's {clip_clip_frac:.3%} "
        f"(at most {th.mask_ratio:g}x wanted)",
        numbers,
    )


def no_clip_collapses(
    peaks: list[float], tails: list[float], any_non_finite: bool, th: Thresholds = Thresholds()
) -> Verdict:
    """peaks, tails: per seed, the best smoothed reward and the tail mean of stale no-clip."""
    numbers = {
        "peaks": peaks,
        "tails": tails,
        "non_finite": any_non_finite,
        "margin": th.collapse_margin * th.reward_range,
    }
    if any_non_finite:
        return Verdict("d", REPRODUCED, "no-clip produced non-finite values", numbers)
    if not peaks:
        return Verdict("d", INCONCLUSIVE, "no stale no-clip run", numbers)
    drops = [p - t for p, t in zip(peaks, tails)]
    numbers["drops"] = drops
    fell = sum(d >= th.collapse_margin * th.reward_range for d in drops)
    if fell * 2 > len(drops):
        return Verdict(
            "d",
            REPRODUCED,
            f"{fell} of {len(drops)} seeds end at least {th.collapse_margin * th.reward_range:.3g} below their peak",
            numbers,
        )
    return Verdict(
        "d",
        NOT_REPRODUCED,
        f"only {fell} of {len(drops)} seeds fall {th.collapse_margin * th.reward_range:.3g} below their peak "
        "(stagnation, not collapse)",
        numbers,
    )
