"""One off-policy schema for any trainer: other trainers' metric names mapped onto the product's
off-policy keys (docs/OFF_POLICY_KEYS.md has the table and what each name measures).

A point of a mapped key is also stored under its product key when it is ingested, so the
staleness, mismatch and clip panels, the alert rules and the study roles read a verl, AReaL,
prime-rl or TRL run exactly as they read a bundled one. The run keeps the original key as well.
A batch that carries the product key itself keeps its own value: a mapping never overwrites.

Names are matched whole, with the prefixes the trainers' loggers add: TRL's through transformers
(`train/`, and `eval/` which is not mapped: eval passes are not training), AReaL's stats tracker
(`ppo_actor/update/`, and `/avg` `/max` `/min` suffixes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from orchestrator.metrics.chunks import Columns


@dataclass(frozen=True)
class Mapping:
    trainer: str
    pattern: str  # a regular expression matched against the whole key
    product_key: str
    note: str


_TRL = r"(?:train/)?"
_AREAL = r"(?:ppo_actor/(?:update/)?)?"

MAPPINGS: tuple[Mapping, ...] = (
    # staleness: how many policy versions old the trained data was
    Mapping("verl", r"training/off_policy/trajectory_staleness/mean", "rollout/staleness_mean", "fully_async trainer"),
    Mapping("verl", r"training/off_policy/trajectory_staleness/max", "rollout/staleness_max", "fully_async trainer"),
    Mapping("AReaL", _AREAL + r"version_stats/sample_staleness_theta_avg", "rollout/staleness_mean", "token-weighted"),
    Mapping("AReaL", _AREAL + r"version_stats/sample_staleness_theta_max", "rollout/staleness_max", ""),
    Mapping("prime-rl", r"off_policy/mean", "rollout/staleness_mean", "rollout age in steps"),
    Mapping("prime-rl", r"off_policy/max", "rollout/staleness_max", "rollout age in steps"),
    # clipping and masking of the policy-gradient tokens
    Mapping("verl", r"actor/pg_clipfrac", "actor/clip_frac", "tokens the PPO clip bound"),
    Mapping("verl", r"actor/pg_clipfrac_lower", "actor/dual_clip_frac", "tokens the dual clip (c) bound"),
    Mapping("TRL", _TRL + r"clip_ratio/region_mean", "actor/clip_frac", "GRPOTrainer: tokens outside the region"),
    Mapping("AReaL", _AREAL + r"clip_ratio(?:/avg)?", "actor/clip_frac", ""),
    Mapping("AReaL", _AREAL + r"dual_clip_ratio(?:/avg)?", "actor/dual_clip_frac", ""),
    Mapping("prime-rl", r"is_masked(?:/mean)?", "actor/masked_frac", "tokens the importance-ratio masks dropped"),
    Mapping(
        "verl",
        r"rollout_corr/rollout_rs_masked_fraction",
        "actor/token_mask_frac",
        "rejection sampling against the rollout engine, tokens",
    ),
    Mapping(
        "verl",
        r"rollout_corr/rollout_rs_seq_masked_fraction",
        "actor/seq_mask_frac",
        "rejection sampling against the rollout engine, sequences",
    ),
    # the rollout engine against the trainer (training-inference mismatch)
    Mapping("verl", r"rollout_corr/k3_kl", "rollout/engine_kl_k3", "K3 KL(rollout || trainer)"),
    Mapping("prime-rl", r"mismatch_kl(?:/all)?(?:/mean)?", "rollout/engine_kl_k3", "trainer against inference"),
    Mapping("AReaL", _AREAL + r"behave_approx_kl(?:/avg)?", "rollout/engine_kl_k3", "K1 estimate: may be negative"),
    Mapping(
        "TRL", _TRL + r"sampling/sampling_logp_difference/mean", "rollout/engine_abs_dlogp", "vLLM against trainer"
    ),
    Mapping("TRL", _TRL + r"sampling/sampling_logp_difference/max", "rollout/engine_abs_dlogp_max", ""),
    Mapping("verl", r"rollout_corr/rollout_is_mean", "rollout/engine_is_weight_mean", "truncated IS weight"),
    Mapping("AReaL", _AREAL + r"behave_imp_weight(?:/avg)?", "rollout/engine_is_weight_mean", "decoupled PPO"),
    Mapping(
        "TRL", _TRL + r"sampling/importance_sampling_ratio/mean", "rollout/engine_is_weight_mean", "vLLM IS correction"
    ),
)

_COMPILED = [(re.compile(m.pattern + r"\Z"), m) for m in MAPPINGS]
PRODUCT_KEYS = frozenset(m.product_key for m in MAPPINGS)


def mapping_of(key: str) -> Mapping | None:
    """The mapping a key falls under, or None."""
    rank = _rank(key)
    return None if rank is None else MAPPINGS[rank]


@lru_cache(maxsize=65_536)
def _rank(key: str) -> int | None:
    """The index in MAPPINGS of the mapping a key falls under (ingestion asks for every key of
    every batch: cached)."""
    if key in PRODUCT_KEYS:
        return None
    return next((rank for rank, (pattern, _) in enumerate(_COMPILED) if pattern.match(key)), None)


def aliases(keys: Iterable[str]) -> dict[str, str]:
    """{source key: product key} for the keys that map, leaving out the product keys among `keys`
    themselves and, of several sources of one product key, all but the first in MAPPINGS order."""
    keys = set(keys)
    chosen: dict[str, tuple[int, str]] = {}
    for key in keys:
        rank = _rank(key)
        if rank is None:
            continue
        product = MAPPINGS[rank].product_key
        if product not in keys and (product not in chosen or rank < chosen[product][0]):
            chosen[product] = (rank, key)
    return {source: product for product, (_, source) in chosen.items()}


def with_product_keys(cols: Columns) -> Columns:
    """The batch with each mapped key's points also under its product key."""
    mapped = aliases(cols.keys)
    if not mapped:
        return cols
    at = [i for i, key in enumerate(cols.keys) if key in mapped]
    return Columns(
        cols.keys + [mapped[cols.keys[i]] for i in at],
        cols.steps + [cols.steps[i] for i in at],
        cols.values + [cols.values[i] for i in at],
        cols.specials + [cols.specials[i] for i in at],
        cols.times + [cols.times[i] for i in at],
    )


def mirrored_by_product_key(keys: Iterable[str], charted: set[str]) -> set[str]:
    """The source keys whose product key a shown panel draws (the page charts them once)."""
    return {k for k in keys if (m := mapping_of(k)) is not None and m.product_key in charted}
