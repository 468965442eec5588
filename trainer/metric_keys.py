"""Every metric key the trainer logs, with its meaning: the one documented table.

The x-axis ("step") of every point is the optimizer update count ("model updates", as the paper
plots it); a training step (one batch) is `algorithm.updates_per_step * algorithm.epochs` updates.

Each key also has a direction (`DIRECTIONS`): "max" when higher is better, "min" when lower is
better, none for counters and settings. The dashboard's "best" uses it. Keys this table does not
know (a custom reward's own stats) get one through `direction(key, custom)`, where `custom` maps a
key or a glob such as `custom/*` to "max" or "min" (the dashboard reads it from
OPL_METRIC_DIRECTIONS). `eval/<set>/acc` has one key per configured eval set.
tests/unit/trainer/test_metric_keys.py fails if the trainer logs a key that is not listed here.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping

from trainer.loss_keys import ENGINE_DRIFT_KEYS, ENGINE_KEYS, POLICY_DRIFT_KEYS, STATS_KEYS, UPDATE_KEYS

METRIC_KEYS: dict[str, str] = {
    # the objective's own stats (trainer/algo/objectives.py), averaged over the step's updates
    "actor/pg_loss": "aggregated policy loss (-J)",
    "actor/clip_frac": "fraction of valid tokens with no gradient: masked (m2po, token/sequence masks) or clipped "
    "(clip objectives, dual clip)",
    "actor/clip_frac_low": "... of them with A < 0 (PPO's r < 1 side; the dual clip's r > c)",
    "actor/clip_frac_high": "... of them with A > 0 (the r > 1 side)",
    "actor/masked_frac": "fraction of valid tokens masked (m2po, token_mask, seq_mask): no gradient",
    "actor/clipped_frac": "fraction of valid tokens clipped (PPO clip, m2po_cap, dual clip): no gradient",
    "actor/reweighted_frac": "fraction of valid tokens reweighted, gradient kept (cispo's clipped weight, the TIS cap, "
    "sapo's gate <= 1/2)",
    "actor/dual_clip_frac": "fraction of valid tokens where the dual clip's c x A bound is active (A < 0, r > c)",
    "actor/token_mask_frac": "fraction of valid tokens the token mask removed (ratio outside [token_mask_low, "
    "token_mask_high])",
    "actor/seq_mask_frac": "fraction of non-empty sequences the sequence mask removed (geometric-mean ratio outside "
    "its band)",
    "actor/sq_log_ratio_penalty": "the penalty term beta x mean((log r)^2) in the loss (0 when off)",
    "actor/m2": "mean (log r)^2 over trust-region tokens before masking/clipping (M2)",
    "actor/m2_after": "the same over trust-region tokens still carrying gradient",
    "actor/m2_all": "mean (log r)^2 over all valid tokens",
    "actor/ppo_kl": "mean -log r over valid tokens",
    "actor/ratio_mean": "mean importance ratio r = pi_theta / pi_behav",
    "actor/ratio_min": "smallest r in the step",
    "actor/ratio_max": "largest r in the step",
    "actor/tr_frac": "fraction of valid tokens in the trust region",
    "actor/m2po_tau": "m2po: tau_m2; m2po_cap: solved tau on |log r|; others 0",
    # trainer/algo/diagnostics.py: over each update's whole minibatch, for every objective
    "actor/ratio_pos_p50": "median r over tokens with A > 0",
    "actor/ratio_pos_p99": "99th percentile (nearest rank) of r over tokens with A > 0",
    "actor/ratio_pos_max": "largest r over tokens with A > 0 in the step",
    "actor/ratio_neg_p50": "median r over tokens with A < 0",
    "actor/ratio_neg_p99": "99th percentile (nearest rank) of r over tokens with A < 0",
    "actor/ratio_neg_max": "largest r over tokens with A < 0 in the step: the runaway tail no mask or clip touches",
    "actor/top_token_share_max": "largest share of sum r|A| carried by one token in an update of the step (1 = one "
    "token sets the direction)",
    "actor/kl_k3": "K3 estimate of KL(pi_behav || pi_theta): mean of r - 1 - log r",
    "actor/chi2": "chi^2(pi_theta || pi_behav) estimate: mean of (r - 1)^2",
    "actor/ess_frac": "effective sample size of the weights r, as a fraction of the tokens: (sum r)^2 / (n sum r^2)",
    # training loop
    "actor/entropy": "mean token entropy of the current policy over trained response tokens (nats)",
    "actor/grad_norm": "global gradient norm before clipping, mean over the step's updates",
    # trainer/algo/token_classes.py: near-deterministic tokens (any task) and the forks task's token classes
    "actor/near_det_frac": "fraction of valid response tokens where the current policy's entropy is below 0.1 nats",
    "actor/decision_frac": "forks: the decision (forking) tokens' share of the valid response tokens",
    "actor/m2_decision": "forks: M2 before masking over the decision tokens in the trust region",
    "actor/m2_format": "forks: M2 before masking over the format tokens (restated letters, EOS) in the trust region",
    "actor/marked_frac_decision": "forks: decision tokens masked (m2po) or clipped (clip objectives), of all decision "
    "tokens",
    "actor/marked_frac_format": "forks: format tokens masked or clipped, of all format tokens",
    "actor/entropy_decision": "forks: mean policy entropy over the decision tokens (nats)",
    "actor/entropy_format": "forks: mean policy entropy over the format tokens (nats)",
    "actor/lr": "learning rate at the step's last update",
    "train/reward_mean": "mean reward of the batch trained on this step",
    "train/reward_std": "std of that reward",
    "train/solved_frac": "fraction of trained samples with reward 1",
    "train/response_len_mean": "mean response length in tokens of the trained batch (EOS included)",
    "train/adv_abs_mean": "mean |advantage| of the trained samples",
    "train/samples_seen": "samples trained on so far",
    "train/tokens_seen": "response tokens trained on so far",
    "train/train_step": "training steps done (each = one batch)",
    "rollout/staleness_mean": "mean staleness in updates (update index - sample's policy version)",
    "rollout/staleness_min": "smallest staleness in the step",
    "rollout/staleness_max": "largest staleness in the step",
    "rollout/reward_mean": "mean reward of the batches generated during this step (the newest policy)",
    "rollout/queue_batches": "batches waiting in the stale queue (stale_k) or generator queue (async)",
    "rollout/dropped_frac": "async: fraction of samples discarded this step for exceeding max_staleness",
    "rollout/dropped_samples": "async: samples discarded since the previous step for exceeding max_staleness "
    "(staleness.on_exceed: drop discards them by design; under wait, never)",
    # trainer/telemetry/staleness.py: per update and per token, over the step's updates
    "rollout/observed_staleness_max": "largest staleness any trained token had at the update that trained it",
    "rollout/staleness_bound": "async: the configured staleness.max_staleness, beside the observed values",
    "rollout/version_span_mean": "partial rollouts: mean over the trained trajectories of the versions each spans "
    "(newest token's - oldest's)",
    "rollout/version_span_max": "partial rollouts: the largest version span of a trained trajectory in the step",
    "rollout/partial_frac": "partial rollouts: share of the trained trajectories continued across a weight update",
    "rollout/engine_kl": "recompute: mean (engine log-prob - trainer log-prob) of sampled tokens (K1: its terms "
    "cancel)",
    "rollout/engine_abs_dlogp": "recompute: mean |engine log-prob - trainer log-prob| of sampled tokens",
    "rollout/engine_abs_dlogp_max": "recompute: the largest |engine log-prob - trainer log-prob| of the step",
    "rollout/engine_kl_k3": "recompute: K3 estimate of KL(pi_engine || pi_trainer), mean of rho - 1 - log rho, rho = "
    "pi_trainer / pi_engine",
    # trainer/algo/diagnostics.py drift_stats, behav_logp: recompute: the ratio pi_theta / pi_engine split in two.
    # Engine mismatch, w = pi_trainer at the behaviour version / pi_engine, over the step's batch:
    "drift/engine_kl_k3": "engine mismatch: K3 estimate of KL(pi_engine || pi_trainer@behav), mean of w - 1 - log w",
    "drift/engine_abs_dlogp": "engine mismatch: mean |log pi_trainer@behav - log pi_engine| of the sampled tokens",
    "drift/engine_abs_dlogp_p99": "engine mismatch: 99th percentile (nearest rank) of that |delta log p|",
    "drift/engine_chi2": "engine mismatch: chi^2 estimate, mean of (w - 1)^2",
    "drift/engine_ess_frac": "engine mismatch: effective sample size of w as a fraction of the tokens",
    # Policy drift, w = pi_theta / pi_trainer at the behaviour version, per update, mean over the step
    # (exactly 0, ESS 1, at learning rate 0):
    "drift/policy_kl_k3": "policy drift: K3 estimate of KL(pi_trainer@behav || pi_theta), mean of w - 1 - log w",
    "drift/policy_abs_dlogp": "policy drift: mean |log pi_theta - log pi_trainer@behav| of the trained tokens",
    "drift/policy_abs_dlogp_p99": "policy drift: 99th percentile (nearest rank) of that |delta log p|",
    "drift/policy_chi2": "policy drift: chi^2 estimate, mean of (w - 1)^2",
    "drift/policy_ess_frac": "policy drift: effective sample size of w as a fraction of the tokens",
    "reward/errors": "rewards of the trained batch that raised inside the reward function (scored 0, warned)",
    "reward/timeouts": "rewards of the trained batch that timed out (scored 0, warned)",
    "actor/skipped_updates": "float16: updates skipped so far because a gradient overflowed (loss scaling)",
    "perf/gen_s": "seconds generating the batches of this step (async: the consumed batch's)",
    "perf/train_s": "seconds of forward, backward and optimizer work this step",
    "perf/weight_sync_s": "vllm: seconds handing the new weights to the engine (gather, transfer, in-place load) this "
    "step",
    "perf/wait_s": "async: seconds the trainer waited for a batch (the wait for a batch)",
    # trainer/telemetry/utilisation.py: where the step's time went. stale_k: one process generates, then trains,
    # so each side idles while the other works; async: the generator's own clock over the step's window
    "perf/trainer_idle_s": "seconds of the step the trainer did not train: async, waiting for a batch; stale_k, "
    "generating",
    "perf/trainer_idle_ratio": "perf/trainer_idle_s as a fraction of the step's wall seconds",
    "perf/gen_idle_s": "seconds the generator neither generated nor loaded weights: async, since the previous step, "
    "held back by the staleness bound or a full queue; stale_k, while the step trained",
    "perf/gen_idle_ratio": "perf/gen_idle_s as a fraction of the wall seconds it covers",
    "perf/wait_weights_s": "async: of perf/gen_idle_s, seconds the generator waited for newer weights (the trainer's "
    "newest would have let it start a batch); stale_k: 0",
    "perf/weight_publish_s": "async: seconds the trainer spent publishing weights to the generator this step "
    "(gather, copy into shared memory)",
    "perf/weight_load_s": "async: seconds the generator spent loading published weights since the previous step",
    "perf/weight_sync_bytes": "bytes of weights handed to the generator or engine this step (async: each publish; "
    "stale_k: the vllm sync; 0 when the engine shares the trainer's weights)",
    "perf/train_tokens_per_s": "trained response tokens per second of training (perf/train_s)",
    "perf/gen_tokens_per_s": "generated response tokens per second of generating (dropped batches included)",
    "perf/step_s": "wall seconds of the step",
    "perf/tokens_per_s": "trained response tokens per wall second of the step",
    "perf/samples_per_s": "trained samples per wall second of the step",
    "eval/avg_acc": "mean of eval/<set>/acc over the eval sets",
    "metrics/push_failures": "metric points the dashboard refused for good so far (a 4xx batch, marked in "
    "metrics.rejected.jsonl for manage.py resend_rejected, or single points it refused); a push a retry "
    "delivered is not counted; logged when it changes",
    "samples/push_failures": "rollout samples the dashboard refused for good so far (marked in samples.rejected.jsonl "
    "for manage.py resend_rejected); a push a retry delivered is not counted; logged when it changes",
    # trainer/ckpt/checkpointer.py: one point per committed checkpoint, at the update it holds
    "checkpoint/bytes": "size of the checkpoint folder of this update (weights, optimizer, queues, state; bytes)",
    "perf/checkpoint_blocked_s": "seconds training waited for that checkpoint (the save, a background write's staging "
    "and any wait for it to finish, the commit)",
    "perf/checkpoint_write_s": "seconds from the start of that checkpoint's save until its weights were written "
    "(background: overlapped with training)",
    # trainer/telemetry/system_metrics.py: sampled every reporting.system_s, the mean since the last point
    "system/cpu_pct": "CPU use of the trainer's process tree (trainer, generator, reward workers), 100 = one core",
    "system/ram_gb": "resident memory of the trainer's process tree (GiB)",
    "system/host_cpu_pct": "CPU use of the whole machine, 100 = every core busy",
    "system/host_ram_pct": "memory in use on the whole machine (%)",
}

PATTERNS = {
    re.compile(r"^rollout/observed_staleness/[0-9]+\Z"): "fraction of the step's trained tokens (over its updates) "
    "whose staleness at the update that trained them was this many updates",
    re.compile(r"^eval/[A-Za-z0-9_\-]+/acc\Z"): "mean@k accuracy on one eval set",
    re.compile(r"^eval/[A-Za-z0-9_\-]+/reward_failures\Z"): "eval answers whose reward errored or timed out",
    re.compile(r"^system/gpu[0-9]+/util_pct\Z"): "NVML: GPU i's utilisation (% of time a kernel ran)",
    re.compile(r"^system/gpu[0-9]+/mem_gb\Z"): "NVML: GPU i's memory in use (GiB, all processes)",
    re.compile(r"^system/gpu[0-9]+/mem_pct\Z"): "NVML: the same as % of the GPU's memory",
    re.compile(r"^system/gpu[0-9]+/power_w\Z"): "NVML: GPU i's power draw (W)",
}

MAX, MIN = "max", "min"
# Higher is better: rewards, accuracies, solved fractions, throughput. Lower is better: losses,
# divergences and trust-region violations, staleness, failures and seconds. Everything else
# (counters, the learning rate, ratios that should sit near 1, entropy, system/...) has no direction.
DIRECTIONS: dict[str, str] = {
    "train/reward_mean": MAX,
    "train/solved_frac": MAX,
    "rollout/reward_mean": MAX,
    "eval/avg_acc": MAX,
    "perf/tokens_per_s": MAX,
    "perf/samples_per_s": MAX,
    "actor/tr_frac": MAX,
    "actor/pg_loss": MIN,
    "actor/clip_frac": MIN,
    "actor/clip_frac_low": MIN,
    "actor/clip_frac_high": MIN,
    "actor/m2": MIN,
    "actor/m2_after": MIN,
    "actor/m2_all": MIN,
    "actor/ppo_kl": MIN,
    "actor/grad_norm": MIN,
    "actor/skipped_updates": MIN,
    "rollout/staleness_mean": MIN,
    "rollout/staleness_min": MIN,
    "rollout/staleness_max": MIN,
    "rollout/dropped_frac": MIN,
    "rollout/dropped_samples": MIN,
    "rollout/observed_staleness_max": MIN,
    "rollout/engine_kl": MIN,
    "reward/errors": MIN,
    "reward/timeouts": MIN,
    "metrics/push_failures": MIN,
    "samples/push_failures": MIN,
    "actor/masked_frac": MIN,
    "actor/clipped_frac": MIN,
    "actor/dual_clip_frac": MIN,
    "actor/token_mask_frac": MIN,
    "actor/seq_mask_frac": MIN,
    "actor/ratio_neg_max": MIN,
    "actor/top_token_share_max": MIN,
    "actor/kl_k3": MIN,
    "actor/chi2": MIN,
    "actor/ess_frac": MAX,
    "rollout/engine_abs_dlogp": MIN,
    "rollout/engine_abs_dlogp_max": MIN,
    "rollout/engine_kl_k3": MIN,
    **{k: (MAX if k.endswith("_ess_frac") else MIN) for k in ENGINE_DRIFT_KEYS + POLICY_DRIFT_KEYS},
    "perf/gen_s": MIN,
    "perf/train_s": MIN,
    "perf/weight_sync_s": MIN,
    "perf/wait_s": MIN,
    "perf/trainer_idle_s": MIN,
    "perf/trainer_idle_ratio": MIN,
    "perf/gen_idle_s": MIN,
    "perf/gen_idle_ratio": MIN,
    "perf/wait_weights_s": MIN,
    "perf/weight_publish_s": MIN,
    "perf/weight_load_s": MIN,
    "perf/train_tokens_per_s": MAX,
    "perf/gen_tokens_per_s": MAX,
    "perf/step_s": MIN,
    "perf/checkpoint_blocked_s": MIN,
}
PATTERN_DIRECTIONS = {
    re.compile(r"^eval/[A-Za-z0-9_\-]+/acc\Z"): MAX,
    re.compile(r"^eval/[A-Za-z0-9_\-]+/reward_failures\Z"): MIN,
}

assert set(DIRECTIONS) <= set(METRIC_KEYS), "direction declared for a key missing from the table"
assert set(STATS_KEYS) <= set(METRIC_KEYS), "objective stats missing from the metric table"
assert set(UPDATE_KEYS + ENGINE_KEYS) <= set(METRIC_KEYS), "diagnostics missing from the metric table"
assert set(ENGINE_DRIFT_KEYS + POLICY_DRIFT_KEYS) <= set(METRIC_KEYS), "drift keys missing from the metric table"


def is_known(key: str) -> bool:
    return key in METRIC_KEYS or any(p.match(key) for p in PATTERNS)


def direction(key: str, custom: Mapping[str, str] | None = None) -> str | None:
    """ "max", "min" or None for `key`. A custom setting (the exact key, else the first glob that
    matches) wins over the table, so a lab can also re-declare a known key."""
    custom = custom or {}
    if key in custom:
        return custom[key]
    for pattern, value in custom.items():
        if any(c in pattern for c in "*?[") and fnmatch.fnmatchcase(key, pattern):
            return value
    if key in DIRECTIONS:
        return DIRECTIONS[key]
    return next((d for p, d in PATTERN_DIRECTIONS.items() if p.match(key)), None)


def parse_directions(text: str) -> dict[str, str]:
    """ "custom/score=max, custom/*_loss=min" -> {key or glob: direction}; errors name the entry."""
    out: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        key, sep, value = (part.strip() for part in entry.partition("="))
        if not sep or not key or value not in (MAX, MIN):
            raise ValueError(f"metric direction {entry!r}: write KEY=max or KEY=min (KEY may be a glob)")
        out[key] = value
    return out
