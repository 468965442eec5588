"""The off-policy corrections by name (docs/SAMPLES.md "Variant names"): a variant is an
objective and the options a run turns on (`m2po+dual_clip`, `grpo+token_mask+tis`), and each one
says what it does to a token. The charts, the compare page's grouping and the samples card use
these; the trainer names the corrections it records the same way.
"""

from __future__ import annotations

from trainer.vocabulary import OBJECTIVES, OPTIONS, variant_of  # noqa: F401 (the pages import them from here)

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
