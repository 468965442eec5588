"""The experiment flow in a real browser: create a 6-run sweep from the generated form, see the
runs queued, cancel one, pause the sweep, then clone a run and change one field."""

import re

import pytest
from playwright.sync_api import expect

from orchestrator.experiments.models import Experiment, Run
from tests.browser.conftest import wait_htmx_idle

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
# the distinct heights of the chart panels Plotly has drawn, and of those it has not drawn yet
PANEL_HEIGHTS = """() => {
    const charts = [...document.querySelectorAll('.metric-panel .panel-chart')];
    const heights = (drawn) => [...new Set(charts.filter((el) => el.classList.contains('js-plotly-plot') === drawn)
        .map((el) => Math.round(el.getBoundingClientRect().height)))];
    return [heights(true), heights(false)];
}"""


def test_sweep_queue_cancel_pause_clone(browser_page, live_url, alice):
    page = browser_page
    page.goto("/experiments/new/")

    # 1. a 6-run sweep from the form: staleness.k in {0, 4, 16} x 2 seeds
    page.fill("#f-name", "flow")
    page.fill("#f-project", "lab")
    page.fill("#f-seeds", "2")
    page.select_option("select[name=sweep-0-field]", "staleness.k")
    page.fill("input[name=sweep-0-values]", "0, 4, 16")
    expect(page.locator("#run-count")).to_have_text("6 runs")

    # live validation names the field as the user types, and clears once fixed
    page.fill("#f-algorithm__lr", "fast")
    expect(page.locator("#err-algorithm__lr")).to_contain_text("not a number: 'fast'")
    page.fill("#f-staleness__k", "-2")
    expect(page.locator("#err-staleness__k")).to_contain_text("greater than or equal to 0")
    page.fill("#f-algorithm__lr", "0.002")
    page.fill("#f-staleness__k", "0")
    expect(page.locator("#err-algorithm__lr")).to_be_empty()
    expect(page.locator("#run-count")).to_have_text("6 runs")

    page.click("text=Preview runs")
    expect(page.locator("#preview-count")).to_have_text("6")
    expect(page.locator(".preview-name").first).to_have_text("s0-seed1")
    assert Run.objects.count() == 0  # the preview queues nothing

    page.click("#queue-button")
    # 2. the sweep page shows the six runs queued
    expect(page).to_have_url(re.compile(r"/experiments/\d+/$"))
    experiment = Experiment.objects.get(name="flow")
    rows = page.locator("table#runs tbody tr")
    expect(rows).to_have_count(6)
    expect(page.locator("table#runs .state-queued")).to_have_count(6)
    expect(page.locator("table#runs")).to_contain_text("s32-seed2")

    # The sweep's charts have no data yet: the panels drawn so far are as tall as those not yet
    # drawn (they started at 300 px and shrank to 140 once drawn, moving what is below them).
    expect(page.locator(".metric-panel .panel-chart.js-plotly-plot").first).to_be_visible()
    drawn, waiting = page.evaluate(PANEL_HEIGHTS)
    assert drawn == waiting == [140], (drawn, waiting)

    # 3. cancel one run from its row
    victim = experiment.runs.get(name="s8-seed1")
    wait_htmx_idle(page)  # the page's own loads (seed statistics) first
    # CI saw the row stay "queued" twice, never here: waiting for the POST itself says which part
    # failed next time (no request: the click or its confirm; a request: its answer and the swap)
    with page.expect_response(
        lambda r: r.request.method == "POST" and r.url.endswith(f"/runs/{victim.pk}/cancel"), timeout=15_000
    ) as answer:
        page.locator(f"#run-row-{victim.pk} button", has_text="cancel").click()
    assert answer.value.status == 200, (answer.value.status, page.http_errors, page.console_errors)
    expect(page.locator(f"#run-row-{victim.pk} .state")).to_have_text("cancelled")
    assert Run.objects.get(pk=victim.pk).state == "cancelled"
    assert experiment.runs.filter(state="queued").count() == 5

    # 4. pause the sweep
    page.click("#pause-sweep")
    expect(page.locator("#experiment-state")).to_have_text("paused")
    assert Experiment.objects.get(pk=experiment.pk).state == "paused"

    # 5. clone a run and change one field
    original = experiment.runs.get(name="s32-seed2")
    page.click(f"text={original.name}")
    expect(page).to_have_url(f"{live_url}/runs/{original.pk}/")
    page.click("#clone-run")
    expect(page.locator("#f-name")).to_have_value("s32-seed2-clone")
    expect(page.locator("#f-staleness__k")).to_have_value("16")
    page.fill("#f-algorithm__tau_m2", "0.08")
    expect(page.locator("#run-count")).to_have_text("1 run")
    page.click("#queue-button")
    expect(page).to_have_url(re.compile(r"/experiments/\d+/$"))
    clone = Run.objects.get(name="s32-seed2-clone")
    assert clone.state == "queued"
    assert clone.config["algorithm"]["tau_m2"] == 0.08
    changed = {f"{s}.{k}" for s in clone.config for k in clone.config[s] if clone.config[s][k] != original.config[s][k]}
    assert changed == {"algorithm.tau_m2"}
    assert page.console_errors == [] and page.http_errors == []


def test_runs_table_filters_in_place_and_selects_runs_to_compare(browser_page, alice, tiny_config):
    from orchestrator.experiments.services import experiment_create

    experiment = experiment_create(
        owner=alice,
        name="grid",
        project="lab",
        config=tiny_config,
        sweep={"staleness.k": [0, 16, 64], "algorithm.objective": ["grpo", "m2po"]},
    )
    page = browser_page
    page.goto("/")
    expect(page.locator("table#runs tbody tr")).to_have_count(6)

    page.fill("#run-query", "algorithm.objective = m2po and staleness.k >= 16")
    page.press("#run-query", "Enter")
    expect(page.locator("table#runs tbody tr")).to_have_count(2)  # swapped by htmx, no reload
    expect(page).to_have_url(re.compile(r"q=algorithm.objective"))
    expect(page.locator("#runs-table")).to_contain_text("m2po-s32")

    ids = sorted(
        experiment.runs.filter(config__algorithm__objective="m2po", config__staleness__k__gte=16).values_list(
            "id", flat=True
        )
    )
    for run_id in ids:
        page.check(f"#run-row-{run_id} .compare-box")
    expect(page.locator("#compare-link")).to_have_attribute(
        "href", re.compile(rf"/compare/\?runs={ids[0]},{ids[1]}$|/compare/\?runs={ids[1]},{ids[0]}$")
    )

    page.fill("#run-query", "staleness.kk = 1")
    page.press("#run-query", "Enter")
    expect(page.locator("#query-error")).to_contain_text("did you mean 'staleness.k'?")
    assert page.console_errors == []
