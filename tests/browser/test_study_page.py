"""Staleness studies in the browser: the experiment page loads the seed statistics and the verdicts, and the
options change them. (`study_report`'s figures need no browser driver: tests/unit/studies/test_study_figures.py.)"""

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from tests.unit.studies.sweeps import FINAL, STEPS, finished_staleness_sweep

pytestmark = pytest.mark.browser


@pytest.fixture
def sweep(alice, tiny_config, settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    return finished_staleness_sweep(alice, tiny_config)


def test_the_experiment_page_shows_statistics_and_verdicts(page_as, server, alice, sweep):
    page = page_as(alice)
    page.goto(f"{server}/experiments/{sweep.pk}/")
    page.wait_for_selector("#study-heatmap")
    assert page.locator("#study-verdicts tr[data-claim='a']").get_attribute("data-status") == "reproduced"
    cell = page.locator("#study-heatmap td[data-cell='algorithm.objective=grpo, staleness.s=16']")
    # the tail (last 10% of updates) is steps 180..198 of a ramp to `final` at 198: mean 189/198 of
    # final, and final averages (0.41 + 0.42) / 2 over the two seeds
    assert float(cell.get_attribute("data-mean")) == pytest.approx(0.415 * 189 / 198)
    assert "Δ" in cell.inner_text()
    page.select_option("select[name=summary]", "best")  # htmx swaps the section in place
    page.wait_for_selector("select[name=summary] option[value=best][selected]", state="attached")
    assert page.locator("#study-heatmap").count() == 1


@pytest.fixture
def off_regime_sweep(alice, tiny_config, settings, tmp_path):
    """Stale m2po with M2 before masking at 40x tau and 70% near-deterministic tokens: (c) cannot
    be judged in the paper's regime, whatever its fractions say."""
    settings.RUNS_DIR = tmp_path / "runs"
    experiment = experiment_create(
        owner=alice,
        name="off-regime",
        config=tiny_config,
        seeds=2,
        sweep={"staleness.k": [0, 8], "algorithm.objective": ["grpo", "m2po"]},
    )
    for run in experiment.runs.all():
        k, objective = run.sweep_values["staleness.k"], run.sweep_values["algorithm.objective"]
        final = FINAL[(k, objective)] + 0.01 * run.seed
        rows = [
            {"step": s, "key": "rollout/reward_mean", "value": 0.2 + (final - 0.2) * s / 198, "time": 1.0e9 + s}
            for s in STEPS
        ]
        m2 = 1.6 if (k, objective) == (8, "m2po") else 0.02
        for key, value in (
            ("actor/m2", m2),
            ("actor/near_det_frac", 0.7),
            ("actor/clip_frac", 0.07 if objective == "m2po" else 0.1),
        ):
            rows += [{"step": s, "key": key, "value": value, "time": 1.0e9 + s} for s in STEPS]
        metrics_ingest(run=run, attempt=1, points=rows)
    experiment.runs.update(state="succeeded")
    return experiment


def test_the_regime_checks_show_beside_each_verdict(page_as, server, alice, off_regime_sweep):
    page = page_as(alice)
    page.goto(f"{server}/experiments/{off_regime_sweep.pk}/")
    page.wait_for_selector("#study-verdicts")
    c = page.locator("#study-verdicts tr[data-claim='c']")
    assert c.get_attribute("data-status") == "outside the paper's regime"
    assert c.locator(".verdict").inner_text() == "outside the paper's regime"
    failed = c.locator(".regime-check[data-check='m2']")
    assert failed.get_attribute("data-passed") == "no" and failed.is_visible()
    assert "40x tau" in failed.inner_text() and "above the paper's regime" in failed.inner_text()
    assert c.locator(".regime-check[data-check='near_det']").get_attribute("data-passed") == "yes"
    assert "70% of tokens near-deterministic" in c.inner_text()
    a = page.locator("#study-verdicts tr[data-claim='a']")
    # symmetric: (a)'s gap is there, but at 40x tau it says nothing about the paper's regime either
    assert a.get_attribute("data-status") == "outside the paper's regime"
    assert "As measured: reproduced" in a.inner_text()
    assert "on-policy's reward moves" in a.inner_text()
    box = c.locator("td").nth(3).bounding_box()  # the checks sit in their own column, beside the verdict
    assert box and box["x"] > c.locator(".verdict").bounding_box()["x"]
    # a looser regime bound (50 tau) from the thresholds form turns the check, in place
    page.locator("details.thresholds summary").click()
    page.fill("input[name=m2_regime]", "50")
    page.locator("input[name=m2_regime]").dispatch_event("change")
    page.wait_for_selector("#study-verdicts tr[data-claim='c'] .regime-check[data-check='m2'][data-passed='yes']")
    assert page.locator("#study-verdicts tr[data-claim='c']").get_attribute("data-status") == "not reproduced"
    assert page.locator("#study-verdicts tr[data-claim='a']").get_attribute("data-status") == "reproduced"
