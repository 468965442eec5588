"""The metric keys the loss and the update diagnostics log, without torch: the dashboard reads them
(trainer/metric_keys.py) and must not need torch to start; algo/objectives.py and algo/diagnostics.py compute them."""

# policy_loss's stats (trainer/algo/objectives.py), one value per micro-batch, averaged over an update
STATS_KEYS = (
    "actor/pg_loss",  # the aggregated loss, penalty included
    "actor/clip_frac",  # fraction of valid tokens with no gradient: masked or clipped
    "actor/clip_frac_low",  # ... of them, those with A < 0 (PPO's r < 1 side; the dual clip's r > c)
    "actor/clip_frac_high",  # ... of them, those with A > 0 (r > 1 side)
    "actor/masked_frac",  # fraction of valid tokens masked (m2po, token_mask, seq_mask)
    "actor/clipped_frac",  # ... clipped (PPO clip, m2po_cap, dual clip)
    "actor/reweighted_frac",  # ... reweighted (cispo, the TIS cap, sapo's gate <= 1/2)
    "actor/dual_clip_frac",  # ... where the dual clip's c A bound is active
    "actor/token_mask_frac",  # ... removed by the token mask
    "actor/seq_mask_frac",  # fraction of non-empty sequences removed by the sequence mask
    "actor/sq_log_ratio_penalty",  # beta agg((log r)^2), the penalty term of the loss
    "actor/m2",  # mean (log r)^2 over trust-region tokens, before masking or clipping
    "actor/m2_after",  # the same over trust-region tokens that still carry gradient
    "actor/m2_all",  # mean (log r)^2 over all valid tokens
    "actor/ppo_kl",  # mean of -log r over valid tokens
    "actor/ratio_mean",  # r over valid tokens
    "actor/ratio_min",
    "actor/ratio_max",
    "actor/tr_frac",  # fraction of valid tokens in the trust region
    "actor/m2po_tau",  # m2po: tau_m2; m2po_cap: the solved tau on |log r|; others: 0
)

# update_diagnostics (trainer/algo/diagnostics.py), once per update over the whole minibatch, and the
# engine's gap to the trainer once per step
UPDATE_KEYS = (
    "actor/ratio_pos_p50",
    "actor/ratio_pos_p99",
    "actor/ratio_pos_max",
    "actor/ratio_neg_p50",
    "actor/ratio_neg_p99",
    "actor/ratio_neg_max",
    "actor/top_token_share_max",
    "actor/kl_k3",
    "actor/chi2",
    "actor/ess_frac",
)
ENGINE_KEYS = ("rollout/engine_abs_dlogp", "rollout/engine_abs_dlogp_max", "rollout/engine_kl_k3")

# The importance ratio pi_theta / pi_engine, split in two (trainer/algo/diagnostics.py drift_stats), under
# behav_logp: recompute. Engine mismatch: pi_trainer at the behaviour version against pi_engine, once
# per step over the batch's sampled tokens. Policy drift: pi_theta against pi_trainer at the
# behaviour version, per update over its minibatch, averaged over the step.
DRIFT_STATS = ("kl_k3", "abs_dlogp", "abs_dlogp_p99", "chi2", "ess_frac")
ENGINE_DRIFT_KEYS = tuple(f"drift/engine_{s}" for s in DRIFT_STATS)
POLICY_DRIFT_KEYS = tuple(f"drift/policy_{s}" for s in DRIFT_STATS)
