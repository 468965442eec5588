"""The default chart panels of an off-policy RL run (run page and compare page).

Each panel says what to look for (`description`, shown under its title). `panels_for` resolves a
panel against the keys a run (or a set of runs) logged and the configs they ran with: one eval
line per benchmark (the average only when it averages several), the M2 threshold tau from the
config, and the token-fraction panel named by what the objective does to those tokens.
"""
import re
from collections.abc import Iterable
from typing import Any

# x-axis choices: the step itself, or the counter/clock a key provides at each step.
# "step" on every chart and in the API is the optimizer update count (see trainer/metric_keys.py).
X_AXES = [
    {"id": "step", "label": "optimizer updates", "key": None},
    {"id": "tokens", "label": "tokens", "key": "train/tokens_seen"},
    {"id": "samples", "label": "samples", "key": "train/samples_seen"},
    {"id": "time", "label": "wall time", "key": "train/reward_mean", "field": "time"},
]

EVAL_SET = re.compile(r"^eval/[^/]+/acc$")
EVAL_AVG = "eval/avg_acc"
FRACTION_KEY = "actor/clip_frac"
MASKING = ("m2po", "m2po_cap")  # objectives that mask tokens; the clip objectives clip them
NO_TRUST_REGION = ("no_clip",)
THRESHOLD_OBJECTIVES = ("m2po", "m2po_cap")  # tau_m2 is their bound on M2

PANELS: list[dict[str, Any]] = [
    {"id": "reward", "title": "Reward", "keys": ["train/reward_mean"],
     "description": "Mean reward of the batch trained on; it should rise. Stale data that stalls it is the failure to look for."},
    {"id": "rollout_reward", "title": "Reward of fresh rollouts", "keys": ["rollout/reward_mean"],
     "description": "Mean reward of the batches the current policy generated this step: the policy's own reward. "
                    "Under staleness the trained batch's reward (above) lags it by s updates."},
    {"id": "eval", "title": "Eval accuracy", "keys": [EVAL_AVG], "pattern": EVAL_SET.pattern,
     "description": "Held-out accuracy per benchmark (the average only with several). This is whether the method helps."},
    {"id": "clip_frac", "title": "Masked / clipped token fraction", "keys": [FRACTION_KEY],
     "description": "Share of tokens that carry no gradient: masked by M2PO (high-M2 tokens), clipped by PPO-style objectives. "
                    "Lower keeps more signal; M2PO masks about 1%."},
    {"id": "m2", "title": "M2 before / after masking", "keys": ["actor/m2", "actor/m2_after"], "log_y": True,
     "threshold": "tau_m2",
     "description": "M2 = mean (log r)² of the importance ratios, log axis. M2PO masks until M2 after masking is under τ (dashed); "
                    "spikes before masking are stale batches. Zeros are not drawn on a log axis."},
    {"id": "ppo_kl", "title": "PPO KL (mean −log r)", "keys": ["actor/ppo_kl"],
     "description": "How far the trained policy is from the one that generated the batch; grows with staleness."},
    {"id": "entropy", "title": "Entropy", "keys": ["actor/entropy"],
     "description": "Mean token entropy (nats). A collapse to 0 means the policy stopped exploring."},
    {"id": "grad_norm", "title": "Grad norm", "keys": ["actor/grad_norm"],
     "description": "Gradient norm before clipping. Spikes often precede a collapse."},
    {"id": "staleness", "title": "Staleness (updates)", "keys": ["rollout/staleness_mean", "rollout/staleness_max"],
     "description": "How many optimizer updates old the trained samples were: s = k × updates per step in stale_k mode."},
    {"id": "response_len", "title": "Response length", "keys": ["train/response_len_mean"],
     "description": "Mean response length in tokens of the trained batch."},
    {"id": "throughput", "title": "Throughput (tokens/s)", "keys": ["perf/tokens_per_s"],
     "description": "Trained response tokens per wall second of a step."},
    # the System group (trainer/system_metrics.py); the GPU panels only where a GPU reported
    {"id": "system_cpu", "group": "System", "title": "System · CPU (%)", "keys": ["system/cpu_pct", "system/host_cpu_pct"],
     "description": "The trainer's process tree (100 = one core) and the whole machine (100 = all cores)."},
    {"id": "system_ram", "group": "System", "title": "System · RAM", "keys": ["system/ram_gb", "system/host_ram_pct"],
     "description": "Resident memory of the trainer's processes (GiB) and the machine's memory in use (%)."},
    {"id": "system_time", "group": "System", "title": "System · time per step (s)",
     "keys": ["perf/gen_s", "perf/train_s", "perf/wait_s"],
     "description": "Where a step's time goes: generating, training, and (async) waiting for a batch. "
                    "Waiting that grows means the GPUs idle on the generator."},
    {"id": "system_gpu_util", "group": "System", "title": "System · GPU utilisation (%)", "keys": [],
     "pattern": r"^system/gpu[0-9]+/util_pct$", "optional": True,
     "description": "Per GPU, NVML's share of time a kernel ran. Low while training means the GPUs wait."},
    {"id": "system_gpu_mem", "group": "System", "title": "System · GPU memory (GiB)", "keys": [],
     "pattern": r"^system/gpu[0-9]+/mem_gb$", "optional": True,
     "description": "Per GPU, memory in use by every process on it."},
    {"id": "system_gpu_power", "group": "System", "title": "System · GPU power (W)", "keys": [],
     "pattern": r"^system/gpu[0-9]+/power_w$", "optional": True,
     "description": "Per GPU power draw."},
    {"id": "push_failures", "group": "System", "title": "System · pushes to the dashboard that failed", "keys": [],
     "pattern": r"^(metrics|samples)/push_failures$", "optional": True,
     "description": "Metric and sample batches the trainer could not deliver so far. An outage's are retried from the "
                    "spool; a batch refused for good (a 4xx) stays in the run folder, marked in *.rejected.jsonl, until "
                    "manage.py resend_rejected stores it. Shown only once a push failed."},
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
    """What actor/clip_frac counts under an objective."""
    if objective in MASKING:
        return f"masked ({objective})"
    if objective in NO_TRUST_REGION:
        return f"none ({objective})"
    return f"clipped ({objective})" if objective else "masked or clipped"


def _objective(config: dict) -> str | None:
    return ((config or {}).get("algorithm") or {}).get("objective")


def thresholds(configs: Iterable[dict]) -> list[dict[str, Any]]:
    """The distinct tau_m2 of the M2PO runs among `configs`, as lines for the M2 panel."""
    taus = set()
    for config in configs:
        algorithm = (config or {}).get("algorithm") or {}
        if algorithm.get("objective", "m2po") in THRESHOLD_OBJECTIVES:
            taus.add(float(algorithm.get("tau_m2", 0.04)))
    return [{"y": tau, "label": f"τ = {tau:g}"} for tau in sorted(taus)]


def panels_for(keys: list[str], configs: Iterable[dict] = ()) -> list[dict[str, Any]]:
    """The default panels resolved against `keys` (what the runs logged) and `configs` (the runs'
    configs): eval lines per benchmark, the tau lines, and the fraction panel's names."""
    configs = list(configs)
    objectives = sorted({o for o in (_objective(c) or "m2po" for c in configs)})
    out = []
    for panel in PANELS:
        resolved = {"id": panel["id"], "title": panel["title"], "keys": list(panel["keys"]),
                    "description": panel["description"], "log_y": panel.get("log_y", False),
                    "lines": [], "labels": {}}
        if panel["id"] == "eval":
            resolved["keys"] = eval_keys(keys)
        elif panel.get("pattern"):
            resolved["keys"] += sorted(k for k in keys if re.match(panel["pattern"], k))
        if panel.get("optional") and not resolved["keys"]:
            continue
        if panel.get("group"):
            resolved["group"] = panel["group"]
        if panel.get("threshold"):
            resolved["lines"] = thresholds(configs)
        if panel["id"] == "clip_frac" and objectives:
            names = [fraction_label(o) for o in objectives]
            resolved["title"] = "Token fraction " + " / ".join(names)
            if len(objectives) == 1:
                resolved["labels"] = {FRACTION_KEY: f"{names[0].split(' ')[0]} fraction"}
        out.append(resolved)
    return out


def panel_keys(panels: list[dict[str, Any]]) -> list[str]:
    return [k for p in panels for k in p["keys"]]
