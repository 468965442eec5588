"""Verdicts on the paper's four staleness claims, each from a test named before the data.

(a) stale clip (PPO/GRPO) ends clearly below on-policy: the 95% t interval of on-policy minus stale
    clip (paired by warm-up and seed where both have the same runs) lies above `margin_a`;
(b) M2PO at high staleness matches on-policy: two one-sided tests (TOST, alpha 0.05) at
    ±`equivalence_margin`, run the same way on no-clip at the same staleness as a negative control;
(c) M2PO masks far fewer tokens than clip clips (paper: 0.06% vs 1.22%): the ratio of the mean
    fractions after the staleness ramp at most `mask_ratio`;
(d) no-clip at high staleness collapses: a majority of seeds fall `collapse_margin` below their
    peak (or turn non-finite), judged only when the no-clip runs go past `collapse_horizon` updates
    after the ramp.

Each verdict is "reproduced", "not reproduced", "inconclusive" or "outside the paper's regime", with
the measured numbers and a reason a person can check. The tests themselves live in
studies/judge.py; docs/STUDY.md gives each with its reason.

Regime checks (`RegimeCheck`) say whether a claim can be tested on the study at all. They are
symmetric: a failed check marks the claim "outside the paper's regime" whichever way its numbers
point (a claim that "holds" outside the regime says no more about the paper than one that fails
there). Too few seeds (fewer than 2) make any verdict inconclusive, and an inconclusive test stays
inconclusive. An unmeasured check (the runs never logged what it needs) blocks nothing but is listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
OUTSIDE_REGIME = "outside the paper's regime"
STATUSES = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, OUTSIDE_REGIME)
TESTABLE, REGIME = "testable", "regime"  # what a failed check means (see the module docstring)


@dataclass(frozen=True)
class Thresholds:
    # (a): on-policy minus stale clip must lie above this, about half the paper's median GRPO gap
    # between s = 0 and s = 256 (0.041 over its six models)
    margin_a: float = 0.025
    equivalence_margin: float = 0.03  # (b): TOST margin of M2PO (and the no-clip control) against on-policy
    mask_ratio: float = 0.1  # (c): M2PO's mask fraction at most this times clip's clip fraction
    collapse_margin: float = 0.1  # (d): tail below peak by this fraction of the reward range
    # (d): judged only past this many updates after the ramp: the paper's no-clip collapses after
    # about 850-1,650 updates
    collapse_horizon: float = 850.0
    reward_range: float = 1.0  # rewards in [0, 1] unless told otherwise
    m2_regime: float = 1.0  # the paper's reading: median M2 before masking after the ramp at most tau
    near_det_min: float = 0.5  # at least this fraction of the tokens near-deterministic
    movement_min: float = 0.1  # on-policy's reward must move this much for a match to mean anything
    run_length: float = 10.0  # a stale run lasts at least this many times its staleness, in updates


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
    """The verdict with its regime checks attached: too few seeds make it inconclusive, an
    inconclusive test stays inconclusive, and any other failed check makes it "outside the paper's
    regime" whichever way it pointed (the measured verdict is kept in numbers["measured_status"])."""
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
    if not failed or verdict.status == INCONCLUSIVE:
        return replace(verdict, checks=checks)
    reason = "; ".join(c.text for c in failed) + f". As measured: {verdict.status}, {verdict.reason}"
    return Verdict(
        verdict.claim, OUTSIDE_REGIME, reason, {**verdict.numbers, "measured_status": verdict.status}, checks
    )
