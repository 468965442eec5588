"""The pages with the sweep at a glance, alert rules, the queue and the warm-up preview, at 1,440
and 1,024 px, as test_layout_widths.py checks the others: no page scrolls sideways. The experiment
and compare pages with the sweep at a glance, the run page with its alert rules open, a project's
alert rules, the cluster page with its queue, and the preview of a preset with a warm-up row.
Screenshots go to OPL_SCREENS_DIR."""

import os
from pathlib import Path

import pytest

from orchestrator.experiments.presets import list_presets
from tests.browser.test_layout_widths import WIDTHS, no_sideways_scroll, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def part_shot(page, selector, name):
    """One card alone, easier to read than the whole page."""
    if folder := os.environ.get("OPL_SCREENS_DIR"):
        page.locator(selector).screenshot(path=str(Path(folder) / f"{name}.png"))


@pytest.mark.parametrize("width", WIDTHS)
def test_glance_alert_rules_and_queue_pages_fit_the_window(page_as, server, alice, lab, width):
    experiment, runs = lab
    page = page_as(alice)
    page.set_viewport_size({"width": width, "height": 900})
    project = experiment.project.name
    for name, url, ready in [
        ("experiment-glance", f"/experiments/{experiment.pk}/", "#sweep-glance[data-ready='1']"),
        ("compare-glance", f"/compare/?experiment={experiment.pk}", "#sweep-glance[data-ready='1']"),
        ("cluster-queue", "/cluster/health", "#queue-table"),
        ("project-alerts", f"/projects/{project}/alerts/", "#project-rules form[data-rule=no_progress]"),
    ]:
        page.goto(server + url)
        if ready.startswith("#sweep-glance"):
            page.locator("#sweep-glance").scroll_into_view_if_needed()  # drawn when it comes near
        page.wait_for_selector(ready)
        if name == "experiment-glance":
            page.wait_for_selector("#study-stats table")  # the seed statistics, loaded by htmx
            part_shot(page, "#sweep-glance", f"glance-{width}")
            part_shot(page, "#study-stats", f"study-stats-{width}")
        no_sideways_scroll(page, name)
        shot(page, f"{name}-{width}")

    page.goto(f"{server}/runs/{runs[0].pk}/")
    page.click("#run-alert-rules summary")
    page.locator("#run-alerts form[data-rule=clip_ceiling] input[name=threshold]").fill("2")
    page.locator("#run-alerts form[data-rule=clip_ceiling] button[type=submit]").click()
    page.wait_for_selector("#run-alerts p.error[data-field=threshold]")  # the longest state: an error shown
    no_sideways_scroll(page, "run-alert-rules")
    rules = page.locator("#run-alerts").bounding_box()
    assert all(
        box["x"] + box["width"] <= rules["x"] + rules["width"] + 1
        for box in page.locator("#run-alerts form.alert-rule button").evaluate_all(
            "els => els.map((e) => { const r = e.getBoundingClientRect(); return {x: r.x, width: r.width}; })"
        )
    ), "a rule's buttons stick out of the alerts card"
    shot(page, f"run-alert-rules-{width}")

    warmed = next(p for p in list_presets() if p.slug == "cpu-demo-staleness-sweep")
    page.goto(f"{server}/experiments/new/?preset={warmed.slug}")
    page.click("text=Preview runs")
    page.wait_for_selector("#preview-warmup-row")
    no_sideways_scroll(page, "preview-warmup")
    shot(page, f"preview-warmup-{width}")
