"""An async run's page in Chromium: observed staleness drawn against the configured bound, the two
drifts in panels of their own, and where the time went, each line named."""

import pytest

from orchestrator.metrics.services import metrics_ingest
from tests.browser.test_panels_story import traces, wait_drawn
from tests.unit.metrics.helpers import make_run, points

pytestmark = pytest.mark.browser

STEPS = range(2, 22, 2)


def test_an_async_runs_page_shows_staleness_against_its_bound_both_drifts_and_the_time(
    page_as, alice, tiny_config, server
):
    tiny_config["staleness"] = {"mode": "async", "max_staleness": 3}
    run, _ = make_run(alice, tiny_config)
    rows = (
        points("rollout/observed_staleness_max", STEPS, lambda s: 3.0 if s > 4 else 1.0)
        + points("rollout/staleness_bound", STEPS, lambda s: 3.0)
        + points("rollout/observed_staleness/1", STEPS, lambda s: 0.4)
        + points("rollout/observed_staleness/3", STEPS, lambda s: 0.6)
        + points("drift/engine_kl_k3", STEPS, lambda s: 1e-6)
        + points("drift/engine_abs_dlogp", STEPS, lambda s: 5e-4)
        + points("drift/policy_kl_k3", STEPS, lambda s: 0.002 * s)
        + points("drift/policy_abs_dlogp", STEPS, lambda s: 0.01 * s)
        + points("drift/engine_ess_frac", STEPS, lambda s: 1.0)
        + points("drift/policy_ess_frac", STEPS, lambda s: 0.9)
        + points("perf/train_s", STEPS, lambda s: 1.2)
        + points("perf/trainer_idle_s", STEPS, lambda s: 0.3)
        + points("perf/gen_idle_s", STEPS, lambda s: 0.5)
        + points("perf/wait_s", STEPS, lambda s: 0.3)
        + points("perf/wait_weights_s", STEPS, lambda s: 0.4)
        + points("perf/trainer_idle_ratio", STEPS, lambda s: 0.2)
        + points("perf/gen_idle_ratio", STEPS, lambda s: 0.3)
    )
    metrics_ingest(run=run, attempt=1, points=rows)
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")

    wait_drawn(page, "staleness_observed")
    drawn = traces(page, "staleness_observed")
    assert [t["name"] for t in drawn if t["role"] == "line"] == ["observed (largest)", "bound"]
    assert [t["y"] for t in drawn if t["role"] == "threshold"] == [[3, 3]]
    wait_drawn(page, "staleness_hist")
    names = [t["name"] for t in traces(page, "staleness_hist") if t["role"] == "line"]
    assert names == ["rollout/observed_staleness/1", "rollout/observed_staleness/3"]

    for panel, keys in (
        ("drift_engine", ["drift/engine_kl_k3", "drift/engine_abs_dlogp"]),
        ("drift_policy", ["drift/policy_kl_k3", "drift/policy_abs_dlogp"]),
    ):
        wait_drawn(page, panel)
        assert [t["name"] for t in traces(page, panel) if t["role"] == "line"] == keys
    assert page.inner_text(".metric-panel[data-panel=drift_policy] .panel-title").startswith("Policy drift")

    wait_drawn(page, "time_went")
    assert [t["name"] for t in traces(page, "time_went") if t["role"] == "line"] == [
        "trainer training",
        "trainer idle",
        "generator idle",
        "wait for a batch",
        "wait for weights",
    ]
    groups = page.locator("[data-panels] h3.panel-group").all_inner_texts()
    assert "Two drifts: engine mismatch and policy drift" in groups and "Where the time went" in groups
