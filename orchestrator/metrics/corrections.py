"""The off-policy corrections by name (docs/SAMPLES.md "Variant names"): a variant is an
objective and the options a run turns on (`m2po+dual_clip`, `grpo+token_mask+tis`), and each one
says what it does to a token. The charts, the compare page's grouping and the samples card use
these; the trainer names the corrections it records the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

OBJECTIVES = ("m2po", "m2po_cap", "grpo", "no_clip", "gspo", "decoupled_ppo", "cispo", "sapo")
# the run's options, in the order a variant names them
OPTIONS = ("dual_clip", "token_mask", "seq_mask", "tis", "sq_penalty")
NO_DUAL_CLIP = ("cispo", "sapo")  # their weights are bounded already

# what each objective and option does to a token: masked / clipped (no gradient) or reweighted
DOES: dict[str, tuple[str, str]] = {  # name: (what it marks, how)
    "m2po": ("masked", "masks the tokens of largest (log r)² until the trust region's M2 is under τ"),
    "m2po_cap": ("clipped", "clips r to [e^−τ, e^τ], τ solved from the M2 budget"),
    "grpo": ("clipped", "clips r to [1−ε_low, 1+ε_high] where PPO's min takes the clip"),
    "no_clip": ("", "keeps every token at its full ratio"),
    "gspo": ("clipped", "clips the sequence's geometric-mean ratio"),
    "decoupled_ppo": ("clipped", "clips π_θ/π_prox, weighted by π_prox/π_behav"),
    "cispo": ("reweighted", "keeps every token's gradient with a clipped, stop-gradient weight"),
    "sapo": ("reweighted", "replaces the clip by a soft gate; reweighted where it halves the gradient"),
    "dual_clip": ("clipped", "clips an A<0 token's objective at c·A: bounds the A<0, r≫1 tail"),
    "token_mask": ("masked", "masks tokens whose ratio is outside [low, high] (IcePop)"),
    "seq_mask": ("masked", "masks whole sequences whose geometric-mean ratio is outside [low, high] (Geo-RS)"),
    "tis": ("reweighted", "caps the weight at min(π_behav/π_engine, C) where it binds"),
    "sq_penalty": ("", "adds β·mean (log r)² to the loss; marks no token"),
}


def objective_of(variant: str) -> str:
    return variant.split("+", 1)[0]


def options_of(variant: str) -> tuple[str, ...]:
    return tuple(variant.split("+")[1:])


def variant_of(config: Mapping | None) -> str:
    """The variant name of a run's config: its objective, then `+option` for each option on, in
    the order of OPTIONS. A config from before an option existed has it off."""
    algorithm = (config or {}).get("algorithm") or {}
    objective = algorithm.get("objective") or "m2po"
    on = {
        "dual_clip": algorithm.get("dual_clip_c") is not None and objective not in NO_DUAL_CLIP,
        "token_mask": bool(algorithm.get("token_mask")),
        "seq_mask": bool(algorithm.get("seq_mask")),
        "tis": algorithm.get("tis_cap") is not None,
        "sq_penalty": bool(algorithm.get("sq_log_ratio_coef") or 0),
    }
    return "+".join([objective, *(option for option in OPTIONS if on[option])])


def variant_order(variant: str) -> tuple:
    """Sort key: fewer options first, then the objectives in the order of OBJECTIVES."""
    objective = objective_of(variant)
    rank = OBJECTIVES.index(objective) if objective in OBJECTIVES else len(OBJECTIVES)
    return len(options_of(variant)), rank, variant


def marks_of(variant: str) -> list[str]:
    """The marks a variant can make, in the order masked, clipped, reweighted."""
    made = {DOES.get(part, ("", ""))[0] for part in variant.split("+")}
    return [m for m in ("masked", "clipped", "reweighted") if m in made]


def describe(variant: str) -> list[tuple[str, str, str]]:
    """[(part, what it marks, how)] for the objective and each option of a variant."""
    return [(part, *DOES.get(part, ("", "not described"))) for part in variant.split("+")]
