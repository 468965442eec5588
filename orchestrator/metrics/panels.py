"""The default chart panels of an off-policy RL run (run page and compare page)."""
import re
from typing import Any

# x-axis choices: the step itself, or the counter/clock a key provides at each step.
X_AXES = [
    {"id": "step", "label": "update step", "key": None},
    {"id": "tokens", "label": "tokens", "key": "train/tokens_seen"},
    {"id": "samples", "label": "samples", "key": "train/samples_seen"},
    {"id": "time", "label": "wall time (h)", "key": "train/reward_mean", "field": "time"},
]

PANELS: list[dict[str, Any]] = [
    {"id": "reward", "title": "Reward", "keys": ["train/reward_mean"]},
    {"id": "eval", "title": "Eval accuracy", "keys": ["eval/avg_acc"], "pattern": r"^eval/[^/]+/acc$"},
    {"id": "clip_frac", "title": "Clipped/masked token fraction", "keys": ["actor/clip_frac"]},
    {"id": "m2", "title": "M2 before / after masking", "keys": ["actor/m2", "actor/m2_after"]},
    {"id": "ppo_kl", "title": "PPO KL (mean −log r)", "keys": ["actor/ppo_kl"]},
    {"id": "entropy", "title": "Entropy", "keys": ["actor/entropy"]},
    {"id": "grad_norm", "title": "Grad norm", "keys": ["actor/grad_norm"]},
    {"id": "staleness", "title": "Staleness (updates)", "keys": ["rollout/staleness_mean", "rollout/staleness_max"]},
    {"id": "response_len", "title": "Response length", "keys": ["train/response_len_mean"]},
    {"id": "throughput", "title": "Throughput (tokens/s)", "keys": ["perf/tokens_per_s"]},
]


def panels_for(keys: list[str]) -> list[dict[str, Any]]:
    """The default panels, with pattern keys (one eval set each) resolved against `keys`."""
    out = []
    for panel in PANELS:
        resolved = list(panel["keys"])
        if pattern := panel.get("pattern"):
            resolved += sorted(k for k in keys if re.match(pattern, k) and k not in resolved)
        out.append({"id": panel["id"], "title": panel["title"], "keys": resolved})
    return out


def panel_keys(panels: list[dict[str, Any]]) -> list[str]:
    return [k for p in panels for k in p["keys"]]
