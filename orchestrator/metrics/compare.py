"""Comparing runs: which config fields differ, for the diff table, grouping and heatmaps.

Configs are compared as `comparable` makes them: the correction lab's options read as
off in a config from before them (so an older m2po run and a new one do not differ in a dozen
fields that neither uses), an option's settings read "n/a" where the option is off, a cap that is
null reads "off", and `correction` names each run's objective with its options (m2po+dual_clip),
a field to group by whenever a run turns an option on."""

from typing import Any

from orchestrator.metrics.corrections import variant_of

CORRECTION = "correction"
NOT_APPLIED = "n/a"
# the correction lab's options: a config from before them ran with each at its default (off)
ADDED_OFF = (
    "dual_clip_c",
    "token_mask",
    "token_mask_ref",
    "token_mask_low",
    "token_mask_high",
    "seq_mask",
    "seq_mask_ref",
    "seq_mask_low",
    "seq_mask_high",
    "sq_log_ratio_coef",
    "sapo_tau_pos",
    "sapo_tau_neg",
)
SETTING_OF = {  # a setting: the switch it belongs to (a boolean field, or the objective it tunes)
    "algorithm.token_mask_ref": "algorithm.token_mask",
    "algorithm.token_mask_low": "algorithm.token_mask",
    "algorithm.token_mask_high": "algorithm.token_mask",
    "algorithm.seq_mask_ref": "algorithm.seq_mask",
    "algorithm.seq_mask_low": "algorithm.seq_mask",
    "algorithm.seq_mask_high": "algorithm.seq_mask",
    "algorithm.sapo_tau_pos": "sapo",
    "algorithm.sapo_tau_neg": "sapo",
}
OFF_WHEN_NULL = ("algorithm.dual_clip_c", "algorithm.tis_cap")


def _added_defaults() -> dict[str, Any]:
    """The defaults of the ADDED_OFF fields the schema has (trainer.config, torch-free)."""
    from trainer.config import AlgorithmConfig

    fields = AlgorithmConfig.model_fields
    return {f"algorithm.{name}": fields[name].default for name in ADDED_OFF if name in fields}


def comparable(config: dict[str, Any], *, bundled: bool = True) -> dict[str, Any]:
    """The flattened config as the compare page compares and groups it (see the module). A config
    the bundled trainer did not run (`bundled` False) is its fields as they are: no defaults."""
    flat = flatten(config)
    if not bundled:
        return flat
    for field, default in _added_defaults().items():
        flat.setdefault(field, default)
    for setting, switch in SETTING_OF.items():
        on = flat.get("algorithm.objective", "m2po") == switch if "." not in switch else bool(flat.get(switch))
        if setting in flat and not on:
            flat[setting] = NOT_APPLIED
    for field in OFF_WHEN_NULL:
        if field in flat and flat[field] is None:
            flat[field] = "off"
    flat[CORRECTION] = variant_of(config)
    return flat


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay values."""
    if not isinstance(config, dict):
        return {prefix: config} if prefix else {}
    out: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


def differing_fields(configs: list[dict[str, Any]], bundled: list[bool] | None = None) -> list[str]:
    """Dotted fields whose value is not the same in every config (missing counts as different),
    compared as `comparable` makes them; `correction` first, when any run turns an option on.
    `bundled` says per config whether the bundled trainer ran it (default: all)."""
    bundled = bundled or [True] * len(configs)
    flat = [comparable(c, bundled=b) for c, b in zip(configs, bundled, strict=True)]
    fields = sorted({f for c in flat for f in c} - {CORRECTION})
    missing = object()
    differ = [f for f in fields if len({repr(c.get(f, missing)) for c in flat}) > 1]
    corrections = [c for c in flat if CORRECTION in c]
    with_options = any(c[CORRECTION] != c.get("algorithm.objective", "m2po") for c in corrections)
    return ([CORRECTION] if with_options and len({c.get(CORRECTION) for c in flat}) > 1 else []) + differ


def fork_steps(runs) -> tuple[dict[int, int], dict[int, int]]:
    """For drawing forks from their parent's step: ({fork id: the parent's update it starts from}
    for every compared run forked at a known step, {parent id: the latest such update} for the
    parents among the compared runs, where their curve may stop)."""
    offsets = {r.pk: r.parent_step for r in runs if r.parent_id is not None and r.parent_step is not None}
    compared = {r.pk for r in runs}
    clip: dict[int, int] = {}
    for r in runs:
        if r.pk in offsets and r.parent_id in compared:
            clip[r.parent_id] = max(clip.get(r.parent_id, 0), offsets[r.pk])
    return offsets, clip
