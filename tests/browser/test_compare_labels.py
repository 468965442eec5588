"""Values from the URL, run names and configs reach Plotly, which renders trace names
and tick labels as a subset of HTML; the compare page must show them as text, never as links."""

from urllib.parse import quote

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from tests.browser.test_charts import KEY
from tests.unit.metrics.helpers import points

pytestmark = pytest.mark.browser
EVIL = "<a href='https://evil.example/'>click</a>"


def test_group_labels_from_the_url_are_text_not_links(page_as, server, alice, tiny_config):
    experiment = experiment_create(
        owner=alice, name="sweep", config=tiny_config, sweep={"algorithm.objective": ["m2po", "grpo"]}
    )
    for run in experiment.runs.all():
        metrics_ingest(run=run, attempt=1, points=points(KEY, range(20)))
    page = page_as(alice)
    page.goto(f"{server}/compare/?experiment={experiment.pk}&group={quote(EVIL)}")
    page.wait_for_selector("#compare[data-ready='1']")
    page.wait_for_selector("[data-legend] .legend-item")  # the compare page's one legend, above the panels
    legend = page.evaluate("""() => [...document.querySelectorAll('[data-legend] .legend-item')]
        .map((el) => ({text: el.textContent, links: el.querySelectorAll('a').length}))""")
    names = page.evaluate("""() => document.querySelector('.panel-chart[data-panel="reward"]').data
        .filter((t) => t.meta && t.meta.role === "mean").map((t) => t.name + t.hovertemplate)""")
    assert names and all("<a" not in name for name in names)  # Plotly's hover labels get escaped text
    assert legend and all(entry["links"] == 0 for entry in legend)
    assert any("<a href='https://evil.example/'>click</a>" in entry["text"] for entry in legend)
    assert page.evaluate("() => document.querySelectorAll('a[href*=\"evil.example\"]').length") == 0


def test_a_panel_says_what_its_dashes_mean_without_a_legend_of_its_own(page_as, server, alice, tiny_config):
    """The compare page's one legend names runs; the M2 panel draws three keys in three dashes and
    the tau threshold as a red dashed line, and its header says which is which."""
    experiment = experiment_create(owner=alice, name="m2 sweep", config=tiny_config, sweep={"train.seed": [1, 2]})
    for run in experiment.runs.all():
        for key in ("actor/m2", "actor/m2_after", "actor/m2_all"):
            metrics_ingest(run=run, attempt=1, points=points(key, range(1, 20), value=lambda s: 0.01 * s))
    page = page_as(alice)
    page.goto(f"{server}/compare/?experiment={experiment.pk}")
    page.wait_for_selector("#compare[data-ready='1']")
    page.wait_for_selector('.metric-panel[data-panel="m2"] .panel-linekey:not([hidden]) .linekey-item', timeout=60_000)
    entries = page.evaluate("""() => [...document.querySelectorAll(
        '.metric-panel[data-panel="m2"] .panel-linekey .linekey-item')]
        .map((el) => [el.textContent, el.dataset.dash])""")
    assert entries == [
        ["actor/m2", "solid"],
        ["actor/m2_after", "dot"],
        ["actor/m2_all", "dash"],
        ["τ = 0.04", "dash"],
    ]
    one_key = page.evaluate(
        """() => document.querySelector('.metric-panel[data-panel="reward"] .panel-linekey')?.hidden"""
    )
    assert one_key in (True, None)  # a one-key panel without thresholds needs no key
