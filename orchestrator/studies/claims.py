"""Verdicts on the paper's four staleness claims, from seed statistics, with explicit thresholds.

(a) stale clip (PPO/GRPO) ends clearly below on-policy;
(b) M2PO at high staleness matches on-policy;
(c) M2PO masks far fewer tokens than clip clips (paper: 0.06% vs 1.22%);
(d) no-clip at high staleness collapses: its tail falls below its own peak, or turns non-finite.

Each verdict is "reproduced", "not reproduced" or "inconclusive", with the measured numbers and a
reason a person can check. An honest "not reproduced" is a result; the wording never says more
than the numbers do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from orchestrator.studies.statistics import Estimate

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"


@dataclass(frozen=True)
class Thresholds:
    gap: float = 0.1  # (a): on-policy - stale clip, as a fraction of the reward range
    mask_ratio: float = 0.1  # (c): M2PO's mask fraction at most this times clip's clip fraction
    collapse_margin: float = 0.1  # (d): tail below peak by this fraction of the reward range
    reward_range: float = 1.0  # rewards in [0, 1] unless told otherwise


@dataclass(frozen=True)
class Verdict:
    claim: str
    status: str
    reason: str
    numbers: dict = field(default_factory=dict)


def _too_few(*estimates: Estimate) -> str | None:
    fewest = min(e.n for e in estimates)
    return f"too few seeds ({fewest}); at least 2 are needed for an interval" if fewest < 2 else None


def stale_clip_below_on_policy(on_policy: Estimate, stale_clip: Estimate, th: Thresholds = Thresholds()) -> Verdict:
    need = th.gap * th.reward_range
    gap = on_policy.mean - stale_clip.mean
    numbers = {"on_policy": on_policy.as_dict(), "stale_clip": stale_clip.as_dict(), "gap": gap, "needed_gap": need}
    if few := _too_few(on_policy, stale_clip):
        return Verdict("a", INCONCLUSIVE, few, numbers)
    if gap < need:
        apart = " (the 95% CIs are apart)" if on_policy.has_interval and stale_clip.has_interval and not stale_clip.overlaps(on_policy) else ""
        return Verdict("a", NOT_REPRODUCED, f"stale clip ends {gap:.3g} below on-policy{apart}, less than the {need:.3g} required", numbers)
    if stale_clip.high >= on_policy.low:
        return Verdict("a", INCONCLUSIVE, f"the gap is {gap:.3g} but the 95% CIs overlap", numbers)
    return Verdict("a", REPRODUCED, f"stale clip ends {gap:.3g} below on-policy and the 95% CIs are apart", numbers)


def m2po_matches_on_policy(on_policy: Estimate, stale_m2po: Estimate, th: Thresholds = Thresholds()) -> Verdict:
    numbers = {"on_policy": on_policy.as_dict(), "stale_m2po": stale_m2po.as_dict(), "difference": stale_m2po.mean - on_policy.mean}
    if few := _too_few(on_policy, stale_m2po):
        return Verdict("b", INCONCLUSIVE, few, numbers)
    if stale_m2po.overlaps(on_policy):
        widest = max(stale_m2po.high - stale_m2po.low, on_policy.high - on_policy.low)
        if widest > 2 * th.gap * th.reward_range:  # overlap of wide intervals says little
            return Verdict("b", INCONCLUSIVE, f"the CIs overlap but one is {widest:.3g} wide, more than twice the "
                                              f"{th.gap * th.reward_range:.3g} gap that counts as a difference", numbers)
        return Verdict("b", REPRODUCED, "M2PO's 95% CI overlaps on-policy's", numbers)
    if stale_m2po.low > on_policy.high:
        return Verdict("b", REPRODUCED, "M2PO ends above on-policy, CIs apart", numbers)
    return Verdict("b", NOT_REPRODUCED, f"M2PO ends {on_policy.mean - stale_m2po.mean:.3g} below on-policy, CIs apart", numbers)


def m2po_masks_fewer_than_clip_clips(m2po_mask_frac: float, clip_clip_frac: float, th: Thresholds = Thresholds()) -> Verdict:
    numbers = {"m2po_mask_frac": m2po_mask_frac, "clip_clip_frac": clip_clip_frac, "max_ratio": th.mask_ratio}
    if math.isnan(m2po_mask_frac) or math.isnan(clip_clip_frac):
        return Verdict("c", INCONCLUSIVE, "a mask or clip fraction is missing", numbers)
    if clip_clip_frac <= 0:
        return Verdict("c", INCONCLUSIVE, "clip clipped nothing at this staleness, so there is nothing to compare", numbers)
    ratio = m2po_mask_frac / clip_clip_frac
    numbers["ratio"] = ratio
    if ratio <= th.mask_ratio:
        return Verdict("c", REPRODUCED, f"M2PO masks {m2po_mask_frac:.3%} of tokens, {ratio:.2g}x clip's {clip_clip_frac:.3%}", numbers)
    return Verdict("c", NOT_REPRODUCED, f"M2PO masks {m2po_mask_frac:.3%}, {ratio:.2g}x clip's {clip_clip_frac:.3%} (at most {th.mask_ratio:g}x wanted)", numbers)


def no_clip_collapses(peaks: list[float], tails: list[float], any_non_finite: bool, th: Thresholds = Thresholds()) -> Verdict:
    """peaks, tails: per seed, the best smoothed reward and the tail mean of stale no-clip."""
    numbers = {"peaks": peaks, "tails": tails, "non_finite": any_non_finite, "margin": th.collapse_margin * th.reward_range}
    if any_non_finite:
        return Verdict("d", REPRODUCED, "no-clip produced non-finite values", numbers)
    if not peaks:
        return Verdict("d", INCONCLUSIVE, "no stale no-clip run", numbers)
    drops = [p - t for p, t in zip(peaks, tails)]
    numbers["drops"] = drops
    fell = sum(d >= th.collapse_margin * th.reward_range for d in drops)
    if fell * 2 > len(drops):
        return Verdict("d", REPRODUCED, f"{fell} of {len(drops)} seeds end at least {th.collapse_margin * th.reward_range:.3g} below their peak", numbers)
    return Verdict("d", NOT_REPRODUCED, f"only {fell} of {len(drops)} seeds fall {th.collapse_margin * th.reward_range:.3g} below their peak (stagnation, not collapse)", numbers)
