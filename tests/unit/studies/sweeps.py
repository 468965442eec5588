"""A small staleness sweep with known outcomes, for the study figures, report and page tests."""

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest

STEPS = range(0, 200, 2)
# Each cell's final reward: stale GRPO falls to half, stale M2PO stays near on-policy.
FINAL = {(0, "grpo"): 0.8, (8, "grpo"): 0.4, (0, "m2po"): 0.8, (8, "m2po"): 0.78}


def finished_staleness_sweep(owner, config):
    """2 staleness levels x 2 objectives x 2 seeds, each run's reward rising linearly to its cell's
    final value (+0.01 per seed), ended succeeded."""
    experiment = experiment_create(
        owner=owner,
        name="study",
        config=config,
        seeds=2,
        sweep={"staleness.k": [0, 8], "algorithm.objective": ["grpo", "m2po"]},
    )
    for run in experiment.runs.all():
        final = FINAL[(run.sweep_values["staleness.k"], run.sweep_values["algorithm.objective"])] + 0.01 * run.seed
        rows = [{"step": s, "key": "rollout/reward_mean", "value": final * s / 198, "time": 1.0e9 + s} for s in STEPS]
        rows += [{"step": s, "key": "actor/clip_frac", "value": 0.01, "time": 1.0e9 + s} for s in STEPS]
        metrics_ingest(run=run, attempt=1, points=rows)
    experiment.runs.update(state="succeeded")
    return experiment
