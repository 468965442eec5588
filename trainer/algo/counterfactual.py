"""Which corrections a recorded sample is also marked by, and their names (docs/SAMPLES.md).

One job: from the run's `algorithm` section, the list of other corrections ("variants") whose
marks the trainer records beside the run's own, each as an objective and the loss parameters it
changes. The loop computes their marks with `objectives.policy_loss_marked` on the very tensors of
the recorded update (no gradient, no extra forward pass); this module only names and chooses them.

A variant name is the objective, then "+option" for each option on, in OPTIONS order:
"m2po", "m2po+dual_clip", "grpo+token_mask+tis". A run whose own variant is O+S gets:
1. every other objective X with the run's options S (less those that do not apply to X): "X+S";
2. every marking option P that is off in the run, switched on for O at the run's thresholds: "O+S+P".
decoupled_ppo needs pi_prox, which only a decoupled_ppo run computes, so it is never a counterfactual;
an "engine" mask needs the engine's log-probs (has_engine).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer import vocabulary
from trainer.algo.objectives import DUAL_CLIP_DEFAULT_C
from trainer.vocabulary import DUAL_CLIP_OBJECTIVES, OBJECTIVES, OPTIONS, variant_name  # noqa: F401 (re-exported)

MARKING_OPTIONS = ("dual_clip", "token_mask", "seq_mask")  # the ones a counterfactual switches on
MAX_VARIANTS = len(OBJECTIVES) - 1 + len(MARKING_OPTIONS)
NEEDS_PROX = ("decoupled_ppo",)


@dataclass(frozen=True)
class Variant:
    name: str
    objective: str
    overrides: dict = field(default_factory=dict)
    """Loss parameters that differ from the run's own (`Trainer._loss_params`)."""


def enabled_options(alg) -> tuple[str, ...]:
    """The options an AlgorithmConfig turns on, in OPTIONS order (the dashboard's rule, one copy)."""
    return vocabulary.enabled_options(alg.model_dump())


def run_variant(alg) -> str:
    """The run's own correction, e.g. "m2po+dual_clip"."""
    return variant_name(alg.objective, enabled_options(alg))


def counterfactual_variants(alg, has_engine: bool) -> list[Variant]:
    """The other corrections to mark a recorded sample with, in a fixed order (at most MAX_VARIANTS)."""
    own = enabled_options(alg)
    out = []
    for objective in OBJECTIVES:
        if objective == alg.objective or objective in NEEDS_PROX:
            continue
        options, overrides = own, {}
        if "dual_clip" in own and objective not in DUAL_CLIP_OBJECTIVES:
            options, overrides = tuple(o for o in own if o != "dual_clip"), {"dual_clip_c": None}
        out.append(Variant(variant_name(objective, options), objective, overrides))
    switch_on = {
        "dual_clip": ({"dual_clip_c": DUAL_CLIP_DEFAULT_C}, alg.objective in DUAL_CLIP_OBJECTIVES),
        "token_mask": ({"token_mask": True}, has_engine or alg.token_mask_ref != "engine"),
        "seq_mask": ({"seq_mask": True}, has_engine or alg.seq_mask_ref != "engine"),
    }
    for option in MARKING_OPTIONS:
        overrides, applies = switch_on[option]
        if option not in own and applies:
            out.append(Variant(variant_name(alg.objective, own + (option,)), alg.objective, overrides))
    return out
