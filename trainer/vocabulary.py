"""The trainer's vocabulary, torch-free, defined once: the objectives, the correction options a run
can turn on, how a run's correction is named (its variant), and the one derivation of updates per
step and staleness in updates. The trainer's config and loss, the counterfactual marks, the
dashboard's charts and compare, and the study figures all import these names from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

OBJECTIVES = ("m2po", "m2po_cap", "grpo", "no_clip", "gspo", "decoupled_ppo", "cispo", "sapo")
# cispo and sapo bound their weights already: a dual clip has nothing to add to them
NO_DUAL_CLIP = ("cispo", "sapo")
DUAL_CLIP_OBJECTIVES = tuple(o for o in OBJECTIVES if o not in NO_DUAL_CLIP)
# the options a run turns on, in the order a variant names them
OPTIONS = ("dual_clip", "token_mask", "seq_mask", "tis", "sq_penalty")
AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
DEFAULT_OBJECTIVE = "m2po"
DEFAULT_UPDATES_PER_STEP = 2  # the config's defaults, which a stored config may leave out
DEFAULT_EPOCHS = 1


def enabled_options(algorithm: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The options an `algorithm` section turns on, in OPTIONS order. A config from before an
    option existed has it off; a dual clip on an objective it does not apply to is off."""
    algorithm = algorithm or {}
    objective = algorithm.get("objective") or DEFAULT_OBJECTIVE
    on = {
        "dual_clip": algorithm.get("dual_clip_c") is not None and objective not in NO_DUAL_CLIP,
        "token_mask": bool(algorithm.get("token_mask")),
        "seq_mask": bool(algorithm.get("seq_mask")),
        "tis": algorithm.get("tis_cap") is not None,
        "sq_penalty": bool(algorithm.get("sq_log_ratio_coef") or 0),
    }
    return tuple(option for option in OPTIONS if on[option])


def variant_name(objective: str, options) -> str:
    """`objective+option+...`, the options in OPTIONS order, e.g. "m2po+dual_clip"."""
    chosen = set(options)
    return "+".join([objective, *(option for option in OPTIONS if option in chosen)])


def variant_of(config: Mapping[str, Any] | None) -> str:
    """The variant name of a run's config (a dict, as stored)."""
    algorithm = (config or {}).get("algorithm") or {}
    return variant_name(algorithm.get("objective") or DEFAULT_OBJECTIVE, enabled_options(algorithm))


def updates_per_step(config: Mapping[str, Any] | None) -> int:
    """Optimizer updates per training step (one batch): updates_per_step x epochs."""
    algorithm = (config or {}).get("algorithm") or {}
    per_step = int(algorithm.get("updates_per_step", DEFAULT_UPDATES_PER_STEP))
    return max(1, per_step * int(algorithm.get("epochs", DEFAULT_EPOCHS)))


def staleness_in_updates(config: Mapping[str, Any] | None, k: int) -> int:
    """A stale_k run's staleness k (in batches) in optimizer updates: k x updates per step."""
    return int(k) * updates_per_step(config)
