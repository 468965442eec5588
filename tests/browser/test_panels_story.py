"""The off-policy panels in Chromium: M2 on a log axis with the run's tau, one eval line per
benchmark, the token fraction named by objective, a description per panel, and a compare legend
that stays one readable row of buttons with 8 runs."""

import os
import threading
import time
from pathlib import Path

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import make_run, points

pytestmark = pytest.mark.browser


def shot(page, name):
    """Screenshots for a person to compare (OPL_SCREENS_DIR=/work/notes/screens)."""
    if folder := os.environ.get("OPL_SCREENS_DIR"):
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def traces(page, panel):
    return page.evaluate(
        """(panel) => {
        const el = document.querySelector(`.panel-chart[data-panel="${panel}"]`);
        return (el.data || []).map((t) => ({
            name: t.name, role: t.meta && t.meta.role, y: t.y, showlegend: t.showlegend}));
    }""",
        panel,
    )


def wait_drawn(page, panel):
    page.wait_for_function(
        """(panel) => {
        const el = document.querySelector(`.panel-chart[data-panel="${panel}"]`);
        return el && el.data && el.data.some((t) => t.meta && t.meta.role === "line");
    }""",
        arg=panel,
    )


def test_run_page_panels_show_tau_on_a_log_m2_axis_and_each_benchmark_once(page_as, alice, tiny_config, server):
    tiny_config["algorithm"]["tau_m2"] = 0.04
    run, _ = make_run(alice, tiny_config)
    spikes = lambda s: 7.0 if s % 5 == 0 else 0.02  # noqa: E731
    rows = (
        points("actor/m2", range(20), spikes)
        + points("actor/m2_after", range(20), lambda s: 0.01)
        + points("eval/avg_acc", [0, 10], lambda s: 0.5)
        + points("eval/arithmetic/acc", [0, 10], lambda s: 0.5)
        + points("actor/clip_frac", range(20), lambda s: 0.01)
    )
    metrics_ingest(run=run, attempt=1, points=rows)
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    wait_drawn(page, "m2")
    assert page.evaluate("() => document.querySelector('.panel-chart[data-panel=m2]').layout.yaxis.type") == "log"
    m2 = traces(page, "m2")
    assert [t["name"] for t in m2 if t["role"] == "line"] == ["actor/m2", "actor/m2_after"]
    [tau] = [t for t in m2 if t["role"] == "threshold"]
    assert tau["name"] == "τ = 0.04" and tau["y"] == [0.04, 0.04]
    wait_drawn(page, "eval")
    assert [t["name"] for t in traces(page, "eval") if t["role"] == "line"] == ["eval/arithmetic/acc"]
    wait_drawn(page, "clip_frac")
    assert [t["name"] for t in traces(page, "clip_frac") if t["role"] == "line"] == ["masked fraction"]
    assert page.inner_text(".metric-panel[data-panel=clip_frac] .panel-title") == "Token fraction masked (m2po)"
    assert "log axis" in page.inner_text(".metric-panel[data-panel=m2] .panel-desc")
    # the export buttons and Plotly's toolbar no longer share the plot's top edge
    head = page.locator(".metric-panel[data-panel=m2] .panel-head").bounding_box()
    chart = page.locator(".metric-panel[data-panel=m2] .panel-chart").bounding_box()
    assert head["y"] + head["height"] <= chart["y"] + 1
    shot(page, "run-panels")


def test_compare_legend_with_eight_runs_is_one_set_of_toggles_and_plots_keep_their_size(
    page_as, alice, tiny_config, server
):
    experiment = experiment_create(
        owner=alice,
        name="eight",
        config=tiny_config,
        sweep={"algorithm.objective": ["m2po", "grpo"], "staleness.k": [0, 1, 2, 4]},
    )
    runs = list(experiment.runs.order_by("id"))
    assert len(runs) == 8
    for i, run in enumerate(runs):
        metrics_ingest(
            run=run,
            attempt=1,
            points=points("train/reward_mean", range(30), lambda s, i=i: s * i)
            + points("actor/clip_frac", range(30), lambda s: 0.02),
        )
    page = page_as(alice)
    page.goto(f"{server}/compare/?experiment={experiment.pk}")
    page.wait_for_selector("#compare[data-ready='1']")
    assert page.locator("[data-legend] .legend-item").count() == 8
    assert page.eval_on_selector("[data-control=hs]", "el => el.value") == "tail_mean"  # the heatmap's default
    assert page.evaluate("() => document.querySelector('.panel-chart[data-panel=reward]').layout.showlegend") is False
    height = page.evaluate(
        "() => document.querySelector('.panel-chart[data-panel=reward] .main-svg').getBoundingClientRect().height"
    )
    assert height >= 280
    names = [t["name"] for t in traces(page, "clip_frac") if t["role"] == "line"]
    assert any(n.endswith("masked (m2po)") for n in names) and any(n.endswith("clipped (grpo)") for n in names)
    shot(page, "compare-8-runs")
    page.click(f"[data-legend] [data-entry=run{runs[0].pk}]")
    assert len([t for t in traces(page, "reward") if t["role"] == "line"]) == 7
    assert page.get_attribute(f"[data-legend] [data-entry=run{runs[0].pk}]", "aria-pressed") == "false"


def test_a_queued_run_shows_its_place_until_its_first_metrics_arrive(page_as, alice, tiny_config, server, client):
    from tests.unit.metrics.helpers import push, start_attempt

    run = experiment_create(owner=alice, name="waiting", config=tiny_config).runs.get()
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    assert "1st;" in page.inner_text("#queue-note")
    assert page.locator("[data-panels]").is_hidden()
    page.wait_for_function("() => document.querySelector('[data-show=live]').textContent.includes('live')")
    run, token = start_attempt(run, 1)
    answers = []  # the ingestion view is async-aware: post from a thread without Playwright's event loop
    thread = threading.Thread(
        target=lambda: answers.append(push(client, run.pk, token, {"points": points("train/reward_mean", range(5))}))
    )
    thread.start()
    thread.join()
    assert answers[0].status_code == 202
    page.wait_for_selector("#queue-note", state="detached", timeout=15_000)
    wait_drawn(page, "reward")
    assert page.locator("[data-panels]").is_visible()


def test_the_experiment_page_draws_its_runs_grouped_by_the_swept_field(page_as, alice, tiny_config, server):
    experiment = experiment_create(owner=alice, name="grid", config=tiny_config, sweep={"staleness.k": [0, 4]}, seeds=2)
    for i, run in enumerate(experiment.runs.order_by("id")):
        metrics_ingest(run=run, attempt=1, points=points("train/reward_mean", range(20), lambda s, i=i: s + i))
    page = page_as(alice)
    page.goto(f"{server}/experiments/{experiment.pk}/")
    page.wait_for_selector("#compare[data-ready='1']")
    bands = page.evaluate("""() => document.querySelector('.panel-chart[data-panel="reward"]').data
        .filter((t) => t.meta && t.meta.role === "band").map((t) => t.meta.group)""")
    assert sorted(bands) == ["0", "4"]
    assert page.url.endswith(f"/experiments/{experiment.pk}/")  # the embedded view leaves the page's URL alone
    page.click("[data-action=share]")
    assert f"/compare/?experiment={experiment.pk}&group=staleness.k" in page.input_value("[data-show=share]")
    shot(page, "experiment-page")
    page.click("#compare-all")
    page.wait_for_selector("#compare[data-ready='1']")
    assert "/compare/?experiment=" in page.url


def test_the_compare_page_extends_live_runs_from_their_streams(page_as, alice, tiny_config, server, client):
    from tests.unit.metrics.helpers import push

    run_a, token_a = make_run(alice, tiny_config, name="a")
    run_b, _ = make_run(alice, tiny_config, name="b")
    for run in (run_a, run_b):
        metrics_ingest(run=run, attempt=1, points=points("train/reward_mean", range(10)))
    page = page_as(alice)
    page.goto(f"{server}/compare/?runs={run_a.pk},{run_b.pk}")
    page.wait_for_selector("#compare[data-ready='1']")
    page.wait_for_function("() => document.querySelector('[data-show=live]').textContent.includes('live (2 runs)')")

    def trainer():
        for start in range(10, 30, 5):
            time.sleep(0.3)
            assert (
                push(
                    client, run_a.pk, token_a, {"points": points("train/reward_mean", range(start, start + 5))}
                ).status_code
                == 202
            )

    thread = threading.Thread(target=trainer)
    thread.start()
    page.wait_for_function(
        """(runId) => {
        const el = document.querySelector('.panel-chart[data-panel="reward"]');
        const line = el.data.find((t) => t.meta && t.meta.role === "line" && t.meta.run === runId);
        return line && line.x.length === 30;
    }""",
        arg=run_a.pk,
        timeout=20_000,
    )
    thread.join()
    lines = page.evaluate("""() => document.querySelector('.panel-chart[data-panel="reward"]').data
        .filter((t) => t.meta && t.meta.role === "line").map((t) => [t.meta.run, t.x])""")
    assert dict(lines) == {run_a.pk: list(range(30)), run_b.pk: list(range(10))}
