"""The System panel group in Chromium: a CPU run's page draws CPU and RAM from its system/...
points, shows its alert card, and draws no GPU panel (none reported)."""

import pytest

from orchestrator.metrics.services import metrics_ingest
from tests.browser.test_panels_story import traces, wait_drawn
from tests.unit.metrics.helpers import make_run, points

pytestmark = pytest.mark.browser


def test_a_cpu_runs_system_panels_show_cpu_and_ram(page_as, alice, tiny_config, server):
    run, _ = make_run(alice, tiny_config)
    rows = (
        points("system/cpu_pct", range(10), lambda s: 95.0)
        + points("system/host_cpu_pct", range(10), lambda s: 50.0)
        + points("system/ram_gb", range(10), lambda s: 1.5)
        + points("system/host_ram_pct", range(10), lambda s: 40.0)
        + points("actor/grad_norm", [10], lambda s: float("nan"))
    )
    metrics_ingest(run=run, attempt=1, points=rows)
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    wait_drawn(page, "system_cpu")
    assert [t["name"] for t in traces(page, "system_cpu") if t["role"] == "line"] == [
        "system/cpu_pct",
        "system/host_cpu_pct",
    ]
    wait_drawn(page, "system_ram")
    assert page.inner_text(".metric-panel[data-panel=system_ram] .panel-title") == "System · RAM"
    assert page.locator(".panel-chart[data-panel=system_gpu_util]").count() == 0
    # one heading over each group (a run with the correction lab's config also gets the Corrections group)
    assert page.locator("[data-panels] h3.panel-group").all_inner_texts() == ["Corrections and the A<0 tail", "System"]
    assert "actor/grad_norm is nan at update 10" in page.inner_text("#run-alerts")
