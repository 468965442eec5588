"""The metric every study page opens on (seed statistics, their heatmap and verdicts, the sweep at
a glance, the compare page's heatmap and summary), so one cell shows one number everywhere: the
reward of fresh rollouts from the current policy first, since a stale run's train/reward_mean is
the reward of rollouts s updates old, which lags its policy by construction."""

STUDY_METRICS = ("rollout/reward_mean", "train/reward_mean")


def default_metric(keys, also: tuple[str, ...] = ()) -> str:
    """The first of STUDY_METRICS (then `also`) the runs logged; else their first key, or ""."""
    logged = set(keys)
    return next((k for k in (*STUDY_METRICS, *also) if k in logged), sorted(logged)[0] if logged else "")
