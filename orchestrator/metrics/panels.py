"""The default chart panels of an off-policy RL run (run page and compare page).

Each panel says what to look for (`description`, shown under its title). `panels_for` resolves a
panel against the keys a run (or a set of runs) logged and the configs they ran with: one eval
line per benchmark (the average only when it averages several), the M2 threshold tau from the
config, and the token-fraction panels named by what the run's correction (its objective and
options, corrections.py) does to those tokens. The Corrections group reads the
runaway A<0 tail: its ratios, the one token's share of the update, and what each correction did.
"""

import hashlib
import re
from collections.abc import Iterable
from typing import Any

from orchestrator.metrics.corrections import DOES, marks_of, options_of, variant_of

# x-axis choices: the step itself, or the counter/clock a key provides at each step.
# "step" on every chart and in the API is the optimizer update count (see trainer/metric_keys.py).
X_AXES = [
    {"id": "step", "label": "optimizer updates", "key": None},
    {"id": "train_step", "label": "training steps", "key": "train/train_step"},
    {"id": "tokens", "label": "tokens", "key": "train/tokens_seen"},
    {"id": "samples", "label": "samples", "key": "train/samples_seen"},
    {"id": "time", "label": "wall time", "key": "train/reward_mean", "field": "time"},
]

CORRECTIONS = "Corrections and the A<0 tail"
DRIFTS = "Two drifts: engine mismatch and policy drift"  # shown once a run logs them (behav_logp: recompute)
TIME = "Where the time went"  # trainer/telemetry/utilisation.py; shown once a run logs them
LOGGED_ONLY = (DRIFTS, TIME)
EVAL_SET = re.compile(r"^eval/[^/]+/acc\Z")
EVAL_AVG = "eval/avg_acc"
FRACTION_KEY = "actor/clip_frac"
THRESHOLD_OBJECTIVES = ("m2po", "m2po_cap")  # tau_m2 is their bound on M2

PANELS: list[dict[str, Any]] = [
    {
        "id": "reward",
        "title": "Reward",
        "keys": ["train/reward_mean"],
        "description": "Mean reward of the batch trained on; it should rise. Stale data that stalls it is the failure "
        "to look for.",
    },
    {
        "id": "rollout_reward",
        "title": "Reward of fresh rollouts",
        "keys": ["rollout/reward_mean"],
        "description": "Mean reward of the batches the current policy generated this step: the policy's own reward. "
        "Under staleness the trained batch's reward (above) lags it by s updates.",
    },
    {
        "id": "eval",
        "title": "Eval accuracy",
        "keys": [EVAL_AVG],
        "pattern": EVAL_SET.pattern,
        "description": "Held-out accuracy per benchmark (the average only with several). This is whether the method "
        "helps.",
    },
    {
        "id": "clip_frac",
        "title": "Masked / clipped token fraction",
        "keys": [FRACTION_KEY],
        "description": "Share of tokens that carry no gradient: masked by M2PO (high-M2 tokens), clipped by PPO-style "
        "objectives. "
        "Lower keeps more signal; M2PO masks about 1%.",
    },
    {
        "id": "m2",
        "title": "M2 before / after masking",
        "keys": ["actor/m2", "actor/m2_after", "actor/m2_all"],
        "log_y": True,
        "threshold": "tau_m2",
        # three noisy series around one threshold: smoothed unless the page's view sets a smoothing
        "smooth": 0.9,
        "description": "M2 = mean (log r)² of the importance ratios over trust-region tokens, log axis. M2PO masks "
        "until M2 after "
        "masking is under τ (dashed); spikes before masking are stale batches. actor/m2_all counts every token, "
        "the A<0, r≫1 ones M2PO never masks included. Zeros are not drawn on a log axis.",
    },
    {
        "id": "ppo_kl",
        "title": "PPO KL (mean −log r)",
        "keys": ["actor/ppo_kl"],
        "description": "How far the trained policy is from the one that generated the batch; grows with staleness.",
    },
    {
        "id": "entropy",
        "title": "Entropy",
        "keys": ["actor/entropy"],
        "description": "Mean token entropy (nats). A collapse to 0 means the policy stopped exploring.",
    },
    {
        "id": "grad_norm",
        "title": "Grad norm",
        "keys": ["actor/grad_norm"],
        "description": "Gradient norm before clipping. Spikes often precede a collapse.",
    },
    {
        "id": "staleness",
        "title": "Staleness (updates)",
        "keys": ["rollout/staleness_mean", "rollout/staleness_max"],
        "description": "How many optimizer updates old the trained samples were: s = k × updates per step in stale_k "
        "mode.",
    },
    {
        "id": "staleness_observed",
        "title": "Observed staleness against the bound",
        "keys": ["rollout/observed_staleness_max", "rollout/staleness_bound"],
        "logged_only": True,
        "threshold": "max_staleness",
        "labels": {"rollout/observed_staleness_max": "observed (largest)", "rollout/staleness_bound": "bound"},
        "description": "The largest staleness any trained token had at the update that trained it, beside "
        "staleness.max_staleness (dashed). Over the bound means it is not holding; the staleness_bound alert "
        "rule fires then.",
    },
    {
        "id": "staleness_hist",
        "title": "Observed staleness histogram (share of trained tokens)",
        "keys": [],
        "pattern": r"^rollout/observed_staleness/[0-9]+$",
        "optional": True,
        "description": "Per step, the share of the trained tokens (over its updates) at each staleness: one line per "
        "staleness seen. Mass near the bound means the generator runs as far ahead as it may.",
    },
    {
        "id": "response_len",
        "title": "Response length",
        "keys": ["train/response_len_mean"],
        "description": "Mean response length in tokens of the trained batch.",
    },
    {
        "id": "throughput",
        "title": "Throughput (tokens/s)",
        "keys": ["perf/tokens_per_s"],
        "description": "Trained response tokens per wall second of a step.",
    },
    # the Corrections group (docs/SAMPLES.md): the runaway A<0 tail and what each correction does about it;
    # shown for runs whose trainer logs them (or whose config has the correction lab's fields, before the first point)
    {
        "id": "neg_tail",
        "group": CORRECTIONS,
        "title": "A<0 tail: ratios of tokens with A < 0",
        "log_y": True,
        "keys": ["actor/ratio_neg_max", "actor/ratio_neg_p99", "actor/ratio_neg_p50"],
        "threshold": "dual_clip_c",
        "description": "r = π_θ/π_behav over tokens with a negative advantage: largest, 99th percentile, median (log "
        "axis). "
        "Neither M2PO's mask nor PPO's clip bounds this quadrant: a largest r in the tens to thousands, with the "
        "share below near 1, is the runaway tail that collapsed stale M2PO. The dual clip (dashed c) clips every "
        "A<0 token above it.",
    },
    {
        "id": "top_share",
        "group": CORRECTIONS,
        "title": "Largest token's share of Σ r·|A|",
        "keys": ["actor/top_token_share_max"],
        "description": "The one token that carries most of the update, as a share of the minibatch's Σ r·|A| (1: one "
        "token is the "
        "whole update, and with gradient clipping it sets the direction). Read it with the A<0 tail: in the "
        "collapsing minibatches one A<0 token with r of 50–2,870 carried 88–99.7%.",
    },
    {
        "id": "pos_ratio",
        "group": CORRECTIONS,
        "title": "A>0 ratios",
        "log_y": True,
        "keys": ["actor/ratio_pos_max", "actor/ratio_pos_p99", "actor/ratio_pos_p50"],
        "description": "r over tokens with a positive advantage: largest, 99th percentile, median (log axis). PPO "
        "clips these "
        "above 1+ε_high; M2PO masks the extreme ones when M2 is over τ.",
    },
    {
        "id": "corrections_frac",
        "group": CORRECTIONS,
        "title": "Tokens each correction acts on",
        "keys": [
            "actor/masked_frac",
            "actor/clipped_frac",
            "actor/reweighted_frac",
            "actor/dual_clip_frac",
            "actor/token_mask_frac",
            "actor/seq_mask_frac",
        ],
        "description": "Fractions of valid tokens: masked (no gradient, by a mask), clipped (no gradient, a clip "
        "bound is active), "
        "reweighted (kept with a changed weight); the option lines split them (seq_mask: a fraction of sequences).",
    },
    {
        "id": "divergence",
        "group": CORRECTIONS,
        "title": "Divergence from the behaviour policy",
        "log_y": True,
        "keys": ["actor/kl_k3", "actor/chi2"],
        "description": "K3 = mean(r − 1 − log r), never negative per token (the K1 mean −log r above can cancel); "
        "χ² = mean (r − 1)² weighs the large ratios, so it jumps with the tail. Log axis.",
    },
    {
        "id": "ess",
        "group": CORRECTIONS,
        "title": "Effective sample size of the ratios",
        "keys": ["actor/ess_frac"],
        "description": "(Σ r)² / (N Σ r²): 1 when every token weighs the same, towards 0 when a few tokens carry the "
        "update.",
    },
    {
        "id": "engine",
        "group": CORRECTIONS,
        "title": "Engine against trainer log-probs",
        "log_y": True,
        "needs": "engine",
        "keys": ["rollout/engine_abs_dlogp", "rollout/engine_abs_dlogp_max", "rollout/engine_kl_k3"],
        "description": "|Δ log p| between the inference engine's log-probs and the trainer's recomputation of the "
        "same policy "
        "(mean and largest), and their K3 KL. Token and sequence masks against the engine act on this gap.",
    },
    {
        "id": "engine_is_weight",
        "group": CORRECTIONS,
        "title": "Engine importance weight",
        "keys": [],
        "pattern": r"^rollout/engine_is_weight_mean$",
        "optional": True,
        "description": "Mean importance weight π_trainer/π_engine of the trained tokens, as other trainers log it "
        "(verl's rollout correction, AReaL's decoupled loss, TRL's vLLM correction): 1 when the engine and the "
        "trainer agree. Shown only where a run logs it.",
    },
    {
        "id": "sq_penalty",
        "group": CORRECTIONS,
        "title": "Squared-log-ratio penalty",
        "keys": ["actor/sq_log_ratio_penalty"],
        "needs": "sq_penalty",
        "description": "β·mean (log r)² added to the loss (prime-rl style): the soft cousin of M2PO's mask; it marks "
        "no token.",
    },
    # the drifts group (trainer/algo/diagnostics.py drift_stats)
    {
        "id": "drift_engine",
        "group": DRIFTS,
        "title": "Engine mismatch (π_trainer at the behaviour version vs π_engine)",
        "log_y": True,
        "keys": ["drift/engine_kl_k3", "drift/engine_abs_dlogp", "drift/engine_abs_dlogp_p99", "drift/engine_chi2"],
        "description": "The engine's numerical gap alone: the trainer's log-probs of the behaviour weights against the "
        "sampler's, on the same tokens (K3, mean and 99th-percentile |Δ log p|, χ²). It does not grow with "
        "staleness; if it grows at learning rate 0, the engine drifts.",
    },
    {
        "id": "drift_policy",
        "group": DRIFTS,
        "title": "Policy drift (π_θ vs π_trainer at the behaviour version)",
        "log_y": True,
        "keys": ["drift/policy_kl_k3", "drift/policy_abs_dlogp", "drift/policy_abs_dlogp_p99", "drift/policy_chi2"],
        "description": "How far the updates moved the policy since the weights that generated the batch (K3, mean and "
        "99th-percentile |Δ log p|, χ²): the staleness part of the importance ratio, 0 at learning rate 0.",
    },
    {
        "id": "drift_ess",
        "group": DRIFTS,
        "title": "Effective sample size: engine vs policy",
        "keys": ["drift/engine_ess_frac", "drift/policy_ess_frac"],
        "description": "(Σ w)² / (N Σ w²) of each drift's weights: 1 when that drift leaves every token the same "
        "weight.",
    },
    # where the time went (trainer/telemetry/utilisation.py)
    {
        "id": "time_went",
        "group": TIME,
        "title": "Where the time went (s per step)",
        "keys": [
            "perf/train_s",
            "perf/trainer_idle_s",
            "perf/gen_idle_s",
            "perf/wait_s",
            "perf/wait_weights_s",
            "perf/weight_publish_s",
            "perf/weight_load_s",
            "perf/weight_sync_s",
        ],
        "labels": {
            "perf/train_s": "trainer training",
            "perf/trainer_idle_s": "trainer idle",
            "perf/gen_idle_s": "generator idle",
            "perf/wait_s": "wait for a batch",
            "perf/wait_weights_s": "wait for weights",
            "perf/weight_publish_s": "weight publish",
            "perf/weight_load_s": "weight load",
            "perf/weight_sync_s": "weight sync (vllm)",
        },
        "description": "Seconds of each step: training, the trainer waiting for a batch, the generator idle (and how "
        "much of that was waiting for newer weights), and the weight hand-over. An idle trainer means "
        "generation is the bottleneck; a generator waiting for weights means the staleness bound holds it back.",
    },
    {
        "id": "idle_ratio",
        "group": TIME,
        "title": "Idle ratio: trainer and generator",
        "keys": ["perf/trainer_idle_ratio", "perf/gen_idle_ratio"],
        "description": "The share of wall time each side idled. Perfect overlap is both near 0; stale_k (one process) "
        "keeps their sum at 1.",
    },
    {
        "id": "tokens_rates",
        "group": TIME,
        "title": "Tokens per second: trained and generated",
        "keys": ["perf/train_tokens_per_s", "perf/gen_tokens_per_s"],
        "description": "Response tokens per second of training and per second of generating: the speed of each side "
        "while it works.",
    },
    {
        "id": "weight_bytes",
        "group": TIME,
        "title": "Weight sync bytes per step",
        "keys": ["perf/weight_sync_bytes"],
        "description": "Bytes of weights handed to the generator or engine in the step (0 when the engine shares the "
        "trainer's weights).",
    },
    # the System group (trainer/telemetry/system_metrics.py); the GPU panels only where a GPU reported
    {
        "id": "system_cpu",
        "group": "System",
        "title": "System · CPU (%)",
        "keys": ["system/cpu_pct", "system/host_cpu_pct"],
        "description": "The trainer's process tree (100 = one core) and the whole machine (100 = all cores).",
    },
    {
        "id": "system_ram",
        "group": "System",
        "title": "System · RAM",
        "keys": ["system/ram_gb", "system/host_ram_pct"],
        "description": "Resident memory of the trainer's processes (GiB) and the machine's memory in use (%).",
    },
    {
        "id": "system_time",
        "group": "System",
        "title": "System · time per step (s)",
        "keys": ["perf/gen_s", "perf/train_s", "perf/wait_s"],
        "description": "Where a step's time goes: generating, training, and (async) waiting for a batch. "
        "Waiting that grows means the GPUs idle on the generator.",
    },
    {
        "id": "system_gpu_util",
        "group": "System",
        "title": "System · GPU utilisation (%)",
        "keys": [],
        "pattern": r"^system/gpu[0-9]+/util_pct$",
        "optional": True,
        "description": "Per GPU, NVML's share of time a kernel ran. Low while training means the GPUs wait.",
    },
    {
        "id": "system_gpu_mem",
        "group": "System",
        "title": "System · GPU memory (GiB)",
        "keys": [],
        "pattern": r"^system/gpu[0-9]+/mem_gb$",
        "optional": True,
        "description": "Per GPU, memory in use by every process on it.",
    },
    {
        "id": "system_gpu_power",
        "group": "System",
        "title": "System · GPU power (W)",
        "keys": [],
        "pattern": r"^system/gpu[0-9]+/power_w$",
        "optional": True,
        "description": "Per GPU power draw.",
    },
    {
        "id": "push_failures",
        "group": "System",
        "title": "System · pushes to the dashboard that failed",
        "keys": [],
        "pattern": r"^(metrics|samples)/push_failures$",
        "optional": True,
        "description": "Metric and sample batches the trainer could not deliver so far. An outage's are retried from "
        "the "
        "spool; a batch refused for good (a 4xx) stays in the run folder, marked in *.rejected.jsonl, until "
        "manage.py resend_rejected stores it. Shown only once a push failed.",
    },
]


def eval_keys(keys: Iterable[str]) -> list[str]:
    """The eval panel's lines: each benchmark once. eval/avg_acc only when it averages two or more
    sets; with one set it equals that set's line and would hide it."""
    keys = set(keys)
    sets = sorted(k for k in keys if EVAL_SET.match(k) and k != EVAL_AVG)
    if len(sets) == 1:
        return sets
    return [EVAL_AVG, *sets] if sets or EVAL_AVG in keys else [EVAL_AVG]


def fraction_label(objective: str | None) -> str:
    """What actor/clip_frac (the tokens with no gradient) counts under an objective or a variant
    (`m2po+dual_clip`: masked or clipped)."""
    if not objective:
        return "masked or clipped"
    dropping = [m for m in marks_of(objective) if m != "reweighted"]
    if not dropping:
        return f"none ({objective})"
    return f"{' or '.join(dropping)} ({objective})"


def _objective(config: dict) -> str | None:
    return ((config or {}).get("algorithm") or {}).get("objective")


def _has_corrections(config: dict) -> bool:
    """A run created with the correction lab's fields: its trainer logs the Corrections group."""
    return "dual_clip_c" in ((config or {}).get("algorithm") or {})


DUAL_CLIP_DEFAULT = 3.0


def dual_clip_lines(configs: Iterable[dict]) -> list[dict[str, Any]]:
    """The distinct dual-clip bounds c of the runs that turn it on, as lines on the A<0 tail panel."""
    cs = {
        float(c) for c in (((cfg or {}).get("algorithm") or {}).get("dual_clip_c") for cfg in configs) if c is not None
    }
    return [{"y": c, "label": f"dual clip c = {c:g}"} for c in sorted(cs)]


# what each split of the Corrections fraction panel counts, and the part of a variant that makes it
FRACTION_KEYS = {
    "actor/masked_frac": "masked",
    "actor/clipped_frac": "clipped",
    "actor/reweighted_frac": "reweighted",
    "actor/dual_clip_frac": "dual_clip",
    "actor/token_mask_frac": "token_mask",
    "actor/seq_mask_frac": "seq_mask",
}


def correction_fractions(variants: list[str]) -> tuple[list[str], dict[str, str]]:
    """The fraction keys the runs' variants can move, and (one variant) their labels named by the
    part that makes each mark: `masked: m2po`, `clipped: grpo, dual_clip`."""
    keys, labels = [], {}
    for key, what in FRACTION_KEYS.items():
        if what in DOES:  # an option's own line: only where a run turns it on
            if any(what in options_of(v) for v in variants):
                keys.append(key)
                labels[key] = f"{what} ({DOES[what][0]})"
            continue
        makers = sorted(
            {part for v in variants for part in v.split("+") if DOES.get(part, ("",))[0] == what},
            key=lambda p: list(DOES).index(p),
        )
        if makers:
            keys.append(key)
            labels[key] = f"{what}: {', '.join(makers)}"
    return keys, labels if len(variants) == 1 else {}


def staleness_bound_lines(configs: Iterable[dict]) -> list[dict[str, Any]]:
    """The distinct max_staleness of the async runs among `configs`, as lines."""
    bounds = set()
    for config in configs:
        staleness = (config or {}).get("staleness") or {}
        if staleness.get("mode") == "async":
            bounds.add(int(staleness.get("max_staleness", 4)))
    return [{"y": b, "label": f"bound = {b}"} for b in sorted(bounds)]


def thresholds(configs: Iterable[dict]) -> list[dict[str, Any]]:
    """The distinct tau_m2 of the M2PO runs among `configs`, as lines for the M2 panel."""
    taus = set()
    for config in configs:
        algorithm = (config or {}).get("algorithm") or {}
        if algorithm.get("objective", "m2po") in THRESHOLD_OBJECTIVES:
            taus.add(float(algorithm.get("tau_m2", 0.04)))
    return [{"y": tau, "label": f"τ = {tau:g}"} for tau in sorted(taus)]


def panels_for(keys: list[str], configs: Iterable[dict] = (), *, bundled: bool = True) -> list[dict[str, Any]]:
    """The default panels resolved against `keys` (what the runs logged) and `configs` (the runs'
    configs): eval lines per benchmark, the tau lines, and the fraction panel's names.

    `bundled`: whether the bundled trainer ran (any of) the runs. Otherwise (an SDK, imported or
    launcher run) its panels are kept only where their keys were logged, and every other logged key
    is a panel of its own, grouped by its first path segment, as W&B charts them."""
    if not bundled:
        shown = _panels_with_logged_keys(keys)
        return shown + logged_key_panels(keys, {k for p in shown for k in p["keys"]})
    configs = list(configs)
    objectives = sorted({_objective(c) or "m2po" for c in configs})
    variants = sorted({variant_of(c) for c in configs})
    logged = set(keys)
    corrections_on = any(_has_corrections(c) for c in configs) or any(
        k in logged for p in PANELS if p.get("group") == CORRECTIONS for k in p["keys"]
    )
    out = []
    for panel in PANELS:
        if panel.get("group") == CORRECTIONS and not _shown_correction_panel(panel, configs, logged, corrections_on):
            continue
        if (panel.get("group") in LOGGED_ONLY or panel.get("logged_only")) and not any(
            k in logged for k in panel["keys"]
        ):
            continue
        resolved = {
            "id": panel["id"],
            "title": panel["title"],
            "keys": list(panel["keys"]),
            "description": panel["description"],
            "log_y": panel.get("log_y", False),
            "lines": [],
            "labels": dict(panel.get("labels", {})),
        }
        if panel.get("smooth"):
            resolved["smooth"] = panel["smooth"]
        if panel["id"] == "eval":
            resolved["keys"] = eval_keys(keys)
        elif panel.get("pattern"):
            resolved["keys"] += sorted(k for k in keys if re.match(panel["pattern"], k))
        if panel.get("optional") and not resolved["keys"]:
            continue
        if panel.get("group"):
            resolved["group"] = panel["group"]
        if panel.get("threshold") == "tau_m2":
            resolved["lines"] = thresholds(configs)
        elif panel.get("threshold") == "dual_clip_c":
            resolved["lines"] = dual_clip_lines(configs)
        elif panel.get("threshold") == "max_staleness":
            resolved["lines"] = staleness_bound_lines(configs)
        if panel["id"] == "corrections_frac":
            resolved["keys"], resolved["labels"] = correction_fractions(variants or ["m2po"])
            if not resolved["keys"]:
                continue
            if len(variants) == 1:
                resolved["title"] = f"Tokens each correction acts on ({variants[0]})"
        if panel["id"] == "clip_frac" and objectives:
            names = [fraction_label(v) for v in variants]
            resolved["title"] = "Token fraction " + " / ".join(names)
            if len(variants) == 1:
                resolved["labels"] = {FRACTION_KEY: f"{names[0].split(' (')[0]} fraction"}
        out.append(resolved)
    return out


def _shown_correction_panel(panel: dict, configs: list[dict], logged: set[str], corrections_on: bool) -> bool:
    """The Corrections group's panels: for runs that log them; the engine panel only with the
    engine's log-probs (rollout.behav_logp recompute) or its keys logged, the penalty panel only
    where a run turns the penalty on."""
    if not corrections_on:
        return False
    if any(k in logged for k in panel["keys"]) and panel.get("needs") != "sq_penalty":
        return True
    needs = panel.get("needs")
    if needs == "engine":
        return any(
            ((c or {}).get("rollout") or {}).get("behav_logp", "recompute") == "recompute" and _has_corrections(c)
            for c in configs
        )
    if needs == "sq_penalty":
        return any(float(((c or {}).get("algorithm") or {}).get("sq_log_ratio_coef") or 0) > 0 for c in configs)
    return True


def panel_keys(panels: list[dict[str, Any]]) -> list[str]:
    return [k for p in panels for k in p["keys"]]


UNGROUPED = "Charts"


def logged_key_panel_id(key: str) -> str:
    """A logged key's panel id: a key is any printable text (quotes, brackets), an id goes into
    HTML attributes and CSS selectors."""
    return "key-" + hashlib.sha1(key.encode()).hexdigest()[:12]


def _panels_with_logged_keys(keys: list[str]) -> list[dict[str, Any]]:
    """The bundled trainer's panels that have logged keys, drawing only those: for runs whose
    config is not the bundled trainer's, so nothing is read from it."""
    logged = set(keys)
    out = []
    for panel in PANELS:
        drawn = [k for k in panel["keys"] if k in logged]
        if panel["id"] == "eval":
            drawn = [k for k in eval_keys(keys) if k in logged]
        elif panel.get("pattern"):
            drawn += sorted(k for k in logged if re.match(panel["pattern"], k))
        if not drawn:
            continue
        resolved = {
            "id": panel["id"],
            "title": panel["title"],
            "keys": drawn,
            "description": panel["description"],
            "log_y": panel.get("log_y", False),
            "lines": [],
            "labels": {},
        }
        if panel.get("smooth"):
            resolved["smooth"] = panel["smooth"]
        if panel.get("group"):
            resolved["group"] = panel["group"]
        out.append(resolved)
    return out


def logged_key_panels(keys: Iterable[str], charted: set[str]) -> list[dict[str, Any]]:
    """One panel per logged key not already charted, grouped by the key's first path segment
    (keys without one under UNGROUPED), groups and keys in name order. A key that only mirrors
    another trainer's name (offpolicy_keys) is left to the off-policy panel that draws it."""
    from orchestrator.metrics.offpolicy_keys import mirrored_by_product_key

    mirrored = mirrored_by_product_key(keys, charted)
    rest = sorted(set(keys) - charted - mirrored)
    by_group: dict[str, list[str]] = {}
    for key in rest:
        group = key.split("/", 1)[0] if "/" in key.strip("/") else UNGROUPED
        by_group.setdefault(group, []).append(key)
    return [
        {
            "id": logged_key_panel_id(key),
            "title": key,
            "keys": [key],
            "description": "",
            "log_y": False,
            "lines": [],
            "labels": {},
            "group": group,
        }
        for group in sorted(by_group, key=lambda g: (g == UNGROUPED, g.lower()))
        for key in by_group[group]
    ]
