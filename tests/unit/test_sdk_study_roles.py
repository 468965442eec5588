"""Studies for any runs: runs logged through the `opl` SDK have no sweep values, only
the config they logged; a role mapping (role.staleness, role.objective, role.seed) makes the
statistics and verdicts group and judge them like a bundled sweep."""

import math

import pytest

from orchestrator.experiments.external_runs import external_run_finish, external_run_open
from orchestrator.metrics.services import metrics_ingest
from orchestrator.studies.report import study_report
from tests.unit.metrics.helpers import points

pytestmark = pytest.mark.django_db
ROLES = {
    "role.staleness": "actor_rollout_ref.rollout.staleness",
    "role.objective": "algorithm.loss",
    "role.seed": "trainer.seed",
}


def log_verl_sweep(owner):
    """A 2 x 2 sweep, 3 seeds a cell, as a verl user logs it: grpo collapses when stale, m2po does not."""
    experiment = None
    for staleness in (0, 16):
        for loss in ("grpo", "m2po"):
            for seed in (1, 2, 3):
                config = {
                    "actor_rollout_ref": {"rollout": {"staleness": staleness}},
                    "algorithm": {"loss": loss},
                    "trainer": {"seed": seed},
                }
                run = external_run_open(
                    user=owner,
                    client_id=f"verl-{staleness}-{loss}-{seed}",
                    name=f"{loss}-s{staleness}-seed{seed}",
                    project="lab",
                    group="verl-sweep",
                    config=config,
                ).run
                collapse = staleness == 16 and loss == "grpo"
                reward = lambda s, c=collapse, k=seed: (0.2 if c else 0.6) + 0.01 * k + 0.001 * s  # noqa: E731
                metrics_ingest(run=run, attempt=1, points=points("train/reward_mean", range(40), reward))
                external_run_finish(run=run, exit_code=0)
                experiment = run.experiment
    return experiment


def test_a_role_mapping_groups_logged_runs_into_cells_of_seeds_and_judges_them(alice):
    experiment = log_verl_sweep(alice)
    assert experiment.runs.count() == 12
    report = study_report(experiment, ROLES)
    assert report.options.errors == []
    cells = {cell.label: cell for cell in report.table.cells.values()}
    assert len(cells) == 4 and all(cell.estimate.n == 3 for cell in cells.values())
    stale_grpo = next(c for c in cells.values() if c.values == {"staleness.s": 16, "algorithm.objective": "grpo"})
    fresh_grpo = next(c for c in cells.values() if c.values == {"staleness.s": 0, "algorithm.objective": "grpo"})
    seeds = stale_grpo.run_values.values()
    assert math.isclose(stale_grpo.estimate.mean, sum(seeds) / 3) and 0.2 < stale_grpo.estimate.mean < 0.3
    assert stale_grpo.difference is not None  # against the same objective at the lowest staleness
    assert fresh_grpo.estimate.mean > stale_grpo.estimate.mean
    assert report.verdicts, "a staleness x objective sweep gets verdicts"

    unmapped = study_report(experiment, {})
    assert len(unmapped.table.cells) == 1 and unmapped.verdicts is None  # without roles: one cell of 12 runs


def test_a_role_no_run_logged_is_named(alice):
    experiment = log_verl_sweep(alice)
    report = study_report(experiment, {**ROLES, "role.objective": "algorithm.nope", "role.seed": "bad path!"})
    fields = {e["field"]: e["message"] for e in report.options.errors}
    assert fields == {
        "role.objective": "no run of this experiment logged 'algorithm.nope'",
        "role.seed": "a dotted config path such as trainer.seed",
    }
