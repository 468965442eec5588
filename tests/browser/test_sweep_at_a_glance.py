"""A sweep at a glance in a real browser: parallel coordinates over a 2x3x3 sweep on the
experiment page and the compare page, each plotted line read back from Plotly and matched with
that run's tail mean in the database; the scatter against an axis; and the compare page's
"Metric over two fields" defaulting to the sweep's axes, not to a field only a warm-up run changes."""

import pytest
from playwright.sync_api import expect

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from orchestrator.metrics.summaries import run_summaries
from tests.unit.metrics.helpers import points

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SWEEP = {"algorithm.objective": ["m2po", "grpo"], "staleness.k": [0, 2, 4], "algorithm.lr": [0.001, 0.0003, 0.0001]}
AXES = ["algorithm.lr", "algorithm.objective", "staleness.k"]

READ_LINES = """() => {
  const trace = document.getElementById('glance-parcoords').data[0];
  const dims = trace.dimensions;
  return trace.ids.map((id, i) => ({
    id: Number(id),
    axes: Object.fromEntries(dims.slice(0, -1)
      .map((d) => [d.label, d.ticktext ? d.ticktext[d.values[i]] : d.values[i]])),
    value: dims[dims.length - 1].values[i],
    colour: trace.line.color[i],
  }));
}"""


@pytest.fixture
def sweep(alice, tiny_config):
    experiment = experiment_create(owner=alice, name="glance", project="lab", config=tiny_config, sweep=SWEEP)
    for i, run in enumerate(experiment.runs.order_by("id")):
        metrics_ingest(
            run=run, attempt=1, points=points("train/reward_mean", range(20), lambda s, i=i: 0.02 * i + s / 100)
        )
    return experiment


def check_lines(page, runs):
    lines = page.evaluate(READ_LINES)
    tails = run_summaries([r.pk for r in runs], ["train/reward_mean"])
    assert sorted(line["id"] for line in lines) == sorted(r.pk for r in runs)  # one line per run
    by_id = {r.pk: r for r in runs}
    for line in lines:
        run = by_id[line["id"]]
        assert line["value"] == pytest.approx(tails[run.pk]["train/reward_mean"]["tail_mean"])
        assert line["colour"] == line["value"]  # coloured by the summary
        config = {
            "algorithm.lr": run.config["algorithm"]["lr"],
            "algorithm.objective": run.config["algorithm"]["objective"],
            "staleness.k": run.config["staleness"]["k"],
        }
        assert {k: str(v) for k, v in line["axes"].items()} == {k: str(v) for k, v in config.items()}


def test_parallel_coordinates_match_each_runs_tail_mean(browser_page, live_url, sweep):
    runs = list(sweep.runs.order_by("id"))
    assert len(runs) == 18
    page = browser_page
    page.goto(f"/experiments/{sweep.pk}/", wait_until="domcontentloaded", timeout=60_000)
    page.locator("#sweep-glance").scroll_into_view_if_needed()  # drawn when it comes near
    expect(page.locator("#sweep-glance")).to_have_attribute("data-ready", "1", timeout=30_000)
    labels = page.evaluate("() => document.getElementById('glance-parcoords').data[0].dimensions.map((d) => d.label)")
    assert labels == [*AXES, "train/reward_mean (tail_mean)"]
    check_lines(page, runs)
    expect(page.locator("#sweep-glance .glance-note")).to_contain_text("18 run(s) on 3 axis(es)")

    # the scatter: the summary against a chosen axis, one point per run
    page.select_option("#sweep-glance select[name=axis]", "staleness.k")
    scatter = page.evaluate(
        "() => { const t = document.getElementById('glance-scatter').data[0]; "
        "return {x: t.x, y: t.y, ids: t.customdata}; }"
    )
    by_id = {r.pk: r for r in runs}
    assert [by_id[i].config["staleness"]["k"] for i in scatter["ids"]] == scatter["x"]
    # another summary: the last value
    page.select_option("#sweep-glance select[name=stat]", "last")
    expect(page.locator("#sweep-glance")).to_have_attribute("data-ready", "1")
    last = page.evaluate(READ_LINES)
    summaries = run_summaries([r.pk for r in runs], ["train/reward_mean"])
    assert all(line["value"] == pytest.approx(summaries[line["id"]]["train/reward_mean"]["last"]) for line in last)
    assert page.console_errors == [] and page.http_errors == []


def test_compare_page_glance_and_heatmap_default_to_the_sweeps_axes(browser_page, live_url, alice, tiny_config):
    small = experiment_create(
        owner=alice,
        name="small",
        project="lab",
        config=tiny_config,
        sweep={"staleness.k": [0, 2, 4], "rollout.temperature": [0.8, 1.0]},
    )
    for i, run in enumerate(small.runs.order_by("id")):
        metrics_ingest(run=run, attempt=1, points=points("train/reward_mean", range(20), lambda s, i=i: 0.05 * i))
    # a warm-up run: only it changes the checkpoint fields, which sort first (the old default was
    # checkpoint.every x checkpoint.keep)
    tiny_config["checkpoint"].update(every=1, keep=5)
    warmup = experiment_create(owner=alice, name="warm-up", project="lab", config=tiny_config).runs.get()
    runs = [warmup, *small.runs.order_by("id")]
    page = browser_page
    page.goto(f"/compare/?runs={','.join(str(r.pk) for r in runs)}", wait_until="domcontentloaded", timeout=60_000)
    page.locator("#sweep-glance").scroll_into_view_if_needed()  # drawn when it comes near
    expect(page.locator("#sweep-glance")).to_have_attribute("data-ready", "1", timeout=30_000)
    options = page.eval_on_selector_all("[data-control=hx] option", "els => els.map((e) => e.value)")
    assert options[:2] == ["checkpoint.every", "checkpoint.keep"]  # still offered, just not the default
    assert page.eval_on_selector("[data-control=hx]", "el => el.value") == "rollout.temperature"
    assert page.eval_on_selector("[data-control=hy]", "el => el.value") == "staleness.k"
    labels = page.evaluate("() => document.getElementById('glance-parcoords').data[0].dimensions.map((d) => d.label)")
    assert labels == ["rollout.temperature", "staleness.k", "train/reward_mean (tail_mean)"]
    lines = page.evaluate(READ_LINES)
    assert sorted(line["id"] for line in lines) == sorted(r.pk for r in runs[1:])  # the warm-up logged no reward
    expect(page.locator("#sweep-glance .glance-note")).to_contain_text("1 without a finite train/reward_mean")
    tails = run_summaries([r.pk for r in runs], ["train/reward_mean"])
    assert all(line["value"] == pytest.approx(tails[line["id"]]["train/reward_mean"]["tail_mean"]) for line in lines)
    assert page.console_errors == [] and page.http_errors == []
