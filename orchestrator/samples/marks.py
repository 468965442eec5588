"""What each off-policy correction did, or would have done, to a sample's tokens (the correction lab,
docs/SAMPLES.md "Marks"): plain functions, no database, no torch.

A correction marks each token at most once, by what happened to its gradient:
- masked      a mask took it out (M2PO's Algorithm 1, token_mask, seq_mask): no gradient;
- clipped     a clip bound is active (PPO clip, m2po_cap, the dual clip): no gradient;
- reweighted  it keeps its gradient, with a weight other than the plain ratio (CISPO, TIS, SAPO).
"Dropped" below means masked or clipped: the token carries no gradient.

Storage: the trainer sends each counterfactual correction as three index lists; a row keeps it as
one string with a character per token up to its last mark ("." none, "m", "c", "r"), so a dense
mark (a whole sequence masked) costs one byte a token, and comparing two corrections is a zip.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from orchestrator.metrics.corrections import objective_of, options_of, variant_order

MARKS = ("masked", "clipped", "reweighted")
CHAR = {"masked": "m", "clipped": "c", "reweighted": "r"}
NAME = {c: name for name, c in CHAR.items()}
NONE = "."
DROPS = frozenset("mc")  # the marks that take a token's gradient away

MAX_VARIANTS = 10  # counterfactual entries per sample
MAX_VARIANT_CHARS = 64  # decoupled_ppo with every option is 58
VARIANT = re.compile(r"^[a-z][a-z0-9_]*(\+[a-z][a-z0-9_]*)*\Z")


def encode(
    n_tokens: int, masked: Iterable[int] = (), clipped: Iterable[int] = (), reweighted: Iterable[int] = ()
) -> str:
    """The marks string of one correction over `n_tokens` tokens (indices at or past it are cut),
    up to its last mark. A token in two lists keeps the first mark of masked, clipped, reweighted."""
    chars = [NONE] * n_tokens
    for name, indices in (("reweighted", reweighted), ("clipped", clipped), ("masked", masked)):
        for i in indices:
            if 0 <= i < n_tokens:
                chars[i] = CHAR[name]
    return "".join(chars).rstrip(NONE)


def decode(marks: str) -> dict[str, list[int]]:
    """{"masked": [...], "clipped": [...], "reweighted": [...]} of a marks string."""
    out: dict[str, list[int]] = {name: [] for name in MARKS}
    for i, c in enumerate(marks):
        if c != NONE:
            out[NAME[c]].append(i)
    return out


def counts(marks: str) -> list[int]:
    """[masked, clipped, reweighted] tokens of a marks string."""
    return [marks.count(CHAR[name]) for name in MARKS]


def mark_at(marks: str, i: int) -> str:
    """ "masked", "clipped", "reweighted" or "" for token i."""
    return NAME[marks[i]] if i < len(marks) and marks[i] != NONE else ""


def dropped(marks: str) -> set[int]:
    return {i for i, c in enumerate(marks) if c in DROPS}


def entry_errors(at: str, entry: Mapping[str, list[int]], n_tokens: int) -> list[dict[str, str]]:
    """Errors of one correction's three lists (`at`: the field path): every index inside the
    tokens, and one mark per token (the lists are disjoint; an index twice in one list is kept once)."""
    errors, seen = [], {}
    for name in MARKS:
        indices = entry.get(name) or []
        bad = [i for i in indices if not 0 <= i < n_tokens]
        if bad:
            errors.append({"field": f"{at}.{name}", "message": f"index {bad[0]} is outside the {n_tokens} tokens"})
            continue
        twice = next((i for i in indices if i in seen), None)
        if twice is not None:
            errors.append(
                {
                    "field": f"{at}.{name}",
                    "message": f"index {twice} is also {seen[twice]}: one mark per token "
                    "(masked, then clipped, then reweighted)",
                }
            )
        seen.update((i, name) for i in indices)
    return errors


def variant_errors(at: str, name: str) -> list[dict[str, str]]:
    if len(name) > MAX_VARIANT_CHARS or not VARIANT.match(name):
        return [
            {
                "field": at,
                "message": f"{name[:50]!r} is not a variant name: an objective and its options, "
                f"like m2po+dual_clip, at most {MAX_VARIANT_CHARS} characters",
            }
        ]
    return []


def sort_variants(names: Iterable[str], first: str | None = None) -> list[str]:
    """`first` (the run's own), then by the number of options and the objective."""
    return sorted(set(names), key=lambda v: (v != first, *variant_order(v)))


def variant_for(objective: str, own: str, recorded: Iterable[str]) -> str | None:
    """The variant of `objective` in a run whose own variant is `own` and that recorded the
    variants `recorded`: its own when the objective is the run's, else that objective at the
    run's options (the recorded one with the fewest options). None when it was not recorded."""
    if objective_of(own) == objective:
        return own
    candidates = [v for v in recorded if objective_of(v) == objective]
    return min(candidates, key=lambda v: (len(options_of(v)), v)) if candidates else None


def contrast_default(own: str, recorded: Iterable[str]) -> str | None:
    """The correction to set beside a run's own by default: clip (grpo) beside M2PO, M2PO beside
    anything else, as the paper compares them; else the first other one recorded."""
    recorded = [v for v in recorded if v != own]
    objective = "grpo" if objective_of(own) in ("m2po", "m2po_cap") else "m2po"
    return variant_for(objective, own, recorded) or (sort_variants(recorded)[0] if recorded else None)
