"""The staleness-learning-rate budget on a sweep over two learning rates and three staleness values:
runs stored through the real ingestion path, the panel drawn on the experiment page with the fitted
boundary, the budget as a regime check, and the advisory for a run queued past it."""

import math

import pytest
from django.test import Client

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from orchestrator.studies.budget import fit_budget, past_budget
from orchestrator.studies.report import study_report
from orchestrator.studies.run_table import RunRow

pytestmark = pytest.mark.django_db

STEPS = list(range(2, 202, 2))
COLLAPSES_FROM = 1.5e-3  # these crafted runs collapse at S·η at or above this


def _curve(collapse: bool):
    # rises to 0.8 at the middle; a collapsing run falls back to 0.2 by the end
    return [0.8 * s / 100 if s <= 100 else (0.8 - 0.6 * (s - 100) / 100 if collapse else 0.8) for s in STEPS]


@pytest.fixture
def lr_sweep(alice, tiny_config, settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    experiment = experiment_create(
        owner=alice,
        name="budget",
        config=tiny_config,
        seeds=2,
        sweep={"staleness.k": [0, 2, 8], "algorithm.lr": [1e-4, 3e-4]},
    )
    for run in experiment.runs.all():
        s = run.sweep_values["staleness.k"] * tiny_config["algorithm"]["updates_per_step"]  # in updates
        lr = run.sweep_values["algorithm.lr"]
        points = [
            {"step": step, "key": "rollout/reward_mean", "value": v, "time": 1.0e9 + step}
            for step, v in zip(STEPS, _curve(s * lr >= COLLAPSES_FROM), strict=True)
        ]
        metrics_ingest(run=run, attempt=1, points=points)
    experiment.runs.update(state="succeeded")
    return experiment


def test_the_panel_draws_final_reward_and_collapse_rate_against_s_eta(alice, lr_sweep):
    report = study_report(lr_sweep, {})
    budget = report.budget
    # S = 0, 4, 16 updates x lr 1e-4, 3e-4: positive S·η 4e-4, 1.2e-3, 1.6e-3, 4.8e-3
    assert [g.s_lr for g in budget.groups] == pytest.approx([4e-4, 1.2e-3, 1.6e-3, 4.8e-3])
    assert [g.collapse_rate for g in budget.groups] == [0, 0, 1, 1]
    assert budget.boundary == pytest.approx(math.sqrt(1.2e-3 * 1.6e-3))
    assert budget.groups[0].t_lr == pytest.approx(200 * 1e-4)  # T·η: 200 updates at lr 1e-4
    client = Client()
    client.force_login(alice)
    html = client.get(f"/experiments/{lr_sweep.pk}/statistics").content.decode()
    assert html.count('class="budget-reward"') == 4 and html.count('class="budget-collapse"') == 4
    assert 'class="budget-boundary"' in html and "collapse begins near S·η = 0.00139" in html
    assert "arXiv 2607.01083" in html
    runs_csv = client.get(f"/experiments/{lr_sweep.pk}/statistics.runs.csv").content.decode().splitlines()
    assert runs_csv[0].endswith(",s_lr,t_lr") and len(runs_csv) == 1 + 12


def test_a_run_queued_past_the_budget_gets_an_advisory(alice, lr_sweep):
    late = lr_sweep.runs.get(sweep_values={"staleness.k": 8, "algorithm.lr": 3e-4}, seed=1)
    late.state = "queued"
    late.save(update_fields=["state"])
    advisories = study_report(lr_sweep, {}).advisories
    assert len(advisories) == 1 and advisories[0].startswith(f"run #{late.pk} queued at S·η = 0.0048")
    within = lr_sweep.runs.get(sweep_values={"staleness.k": 2, "algorithm.lr": 1e-4}, seed=1)
    within.state = "queued"
    within.save(update_fields=["state"])
    assert len(study_report(lr_sweep, {}).advisories) == 1  # 4e-4 is within the budget


def _row(objective, s, lr, collapsed):
    return RunRow(objective, s, "1", lr=lr, tail=0.5, collapsed=collapsed, updates_after_ramp=1000)


def test_the_budget_leaves_no_clip_out_and_says_when_it_is_unknown():
    rows = [_row("grpo", 16, 1e-4, False), _row("no_clip", 64, 1e-4, True), _row("grpo", 64, 1e-4, False)]
    budget = fit_budget(rows)
    assert budget.boundary is None and budget.reaches == pytest.approx(6.4e-3)
    assert past_budget(64, 1e-3, budget) is None  # no boundary measured: no advisory
    everywhere = fit_budget([_row("grpo", 16, 1e-4, True), _row("grpo", 64, 1e-4, True)])
    assert everywhere.boundary is None and everywhere.collapses_from == pytest.approx(1.6e-3)
    assert "the budget lies below" in everywhere.text
