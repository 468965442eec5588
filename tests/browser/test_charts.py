"""Charts in headless Chromium against a real uvicorn (the ASGI path the live stream needs; the
shared live_server is WSGI). Chromium comes from tests/browser/conftest.py's `browser` fixture."""

import threading
import time
from pathlib import Path

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import make_run, points, push

pytestmark = pytest.mark.browser
KEY = "train/reward_mean"


def push_off_loop(client, run_id, token, body):
    """push() from a thread of its own: Playwright keeps an event loop in the test's thread, and the
    ingestion view (async-aware since its queue) refuses to run its sync parts under a running loop."""
    answers = []
    thread = threading.Thread(target=lambda: answers.append(push(client, run_id, token, body)))
    thread.start()
    thread.join()
    return answers[0]


def line_points(page, panel):
    """Points in the panel's line traces (what the user sees), read from Plotly's data."""
    return page.evaluate(
        """(panel) => {
        const el = document.querySelector(`.panel-chart[data-panel="${panel}"]`);
        return (el && el.data || []).filter((t) => t.meta && t.meta.role === "line").map((t) => t.x);
    }""",
        panel,
    )


def test_a_live_runs_chart_grows_while_the_trainer_posts(page_as, server, client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    assert push_off_loop(client, run.pk, token, {"points": points(KEY, range(10))}).status_code == 202
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    page.wait_for_function("() => document.querySelector('[data-show=live]').textContent.includes('live')")
    assert line_points(page, "reward") == [list(range(10))]

    def trainer():
        for start in range(10, 40, 5):
            time.sleep(0.3)
            assert push(client, run.pk, token, {"points": points(KEY, range(start, start + 5))}).status_code == 202

    thread = threading.Thread(target=trainer)
    thread.start()
    page.wait_for_function(
        """() => {
        const el = document.querySelector('.panel-chart[data-panel="reward"]');
        const line = el.data.find((t) => t.meta && t.meta.role === "line");
        return line && line.x.length >= 40;
    }""",
        timeout=20_000,
    )
    thread.join()
    assert line_points(page, "reward") == [list(range(40))]  # in order, nothing twice


def test_grouping_draws_one_band_per_group(page_as, server, alice, tiny_config):
    experiment = experiment_create(
        owner=alice, name="sweep", config=tiny_config, sweep={"algorithm.objective": ["m2po", "grpo"]}, seeds=2
    )
    for i, run in enumerate(experiment.runs.order_by("id")):
        metrics_ingest(run=run, attempt=1, points=points(KEY, range(50), value=lambda s, i=i: s * (1 + i)))
    page = page_as(alice)
    page.goto(f"{server}/compare/?experiment={experiment.pk}")
    page.wait_for_selector("#compare[data-ready='1']")
    page.select_option("[data-control=group]", "algorithm.objective")
    bands = page.evaluate("""() => document.querySelector('.panel-chart[data-panel="reward"]').data
        .filter((t) => t.meta && t.meta.role === "band").map((t) => t.meta.group)""")
    assert sorted(bands) == ["grpo", "m2po"]
    assert "group=algorithm.objective" in page.url  # the shareable URL follows the view

    page.check("[data-control=individual]")
    lines = page.evaluate("""() => document.querySelector('.panel-chart[data-panel="reward"]').data
        .filter((t) => t.meta && t.meta.role === "line").length""")
    assert lines == 4

    with page.expect_download() as download:  # any chart's data, as CSV
        page.click(".metric-panel[data-panel=reward] [data-export=csv]")
    lines = Path(download.value.path()).read_text().splitlines()
    assert lines[0] == "trace,run,key,step,x,value" and len(lines) == 1 + 4 * 50

    page.goto(page.url)  # the shared link restores grouping and the runs toggle
    page.wait_for_selector("#compare[data-ready='1']")
    assert page.eval_on_selector("[data-control=group]", "el => el.value") == "algorithm.objective"
    assert (
        page.evaluate("""() => document.querySelector('.panel-chart[data-panel="reward"]').data
        .filter((t) => t.meta && t.meta.role === "band").length""")
        == 2
    )


def test_zooming_refetches_the_visible_range_at_full_resolution(page_as, server, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    for start in range(0, 30_000, 10_000):
        metrics_ingest(run=run, attempt=1, points=points(KEY, range(start, start + 10_000)))
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    page.wait_for_function("""() => {
        const el = document.querySelector('.panel-chart[data-panel="reward"]');
        return el && el.data && el.data.some((t) => t.meta && t.meta.role === "line");
    }""")
    [overview] = line_points(page, "reward")
    assert len(overview) < 5_000  # downsampled to the chart's width

    with page.expect_request(lambda r: "start=" in r.url and "key=train%2Freward_mean" in r.url) as request:
        page.evaluate("""() => Plotly.relayout(document.querySelector('.panel-chart[data-panel="reward"]'),
                                                 {'xaxis.range': [12000, 12600]})""")
    assert "end=12600" in request.value.url
    page.wait_for_function("""() => {
        const line = document.querySelector('.panel-chart[data-panel="reward"]').data
            .find((t) => t.meta && t.meta.role === "line");
        return line.x.filter((x) => x >= 12000 && x <= 12600).length === 601;
    }""")


def test_a_restart_while_watching_redraws_one_clean_line_with_an_attempt_marker(
    page_as, server, client, alice, tiny_config
):
    from tests.unit.metrics.helpers import start_attempt

    run, token = make_run(alice, tiny_config)
    assert push_off_loop(client, run.pk, token, {"points": points(KEY, range(20))}).status_code == 202
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    page.wait_for_function("() => document.querySelector('[data-show=live]').textContent.includes('live')")
    run, token2 = start_attempt(run, 2)  # requeued; resumes from its checkpoint at step 10
    assert (
        push_off_loop(
            client, run.pk, token2, {"attempt": 2, "points": points(KEY, range(10, 15), value=lambda s: 5.0)}
        ).status_code
        == 202
    )
    page.wait_for_function(
        """() => {
        const el = document.querySelector('.panel-chart[data-panel="reward"]');
        return (el.layout.annotations || []).some((a) => a.text === "attempt 2");
    }""",
        timeout=20_000,
    )
    line = page.evaluate("""() => document.querySelector('.panel-chart[data-panel="reward"]').data
        .find((t) => t.meta && t.meta.role === "line")""")
    assert line["x"] == list(range(15))
    assert line["y"][9] == 0.9 and line["y"][10:] == [5.0] * 5


def test_a_key_logged_once_is_drawn_as_a_point(page_as, server, alice, tiny_config):
    """A count logged once (one push that failed) has no line to draw: its point is shown."""
    run, _ = make_run(alice, tiny_config)
    metrics_ingest(
        run=run, attempt=1, points=points(KEY, range(10)) + points("metrics/push_failures", [3], lambda s: 1)
    )
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    page.locator(".metric-panel[data-panel='push_failures']").scroll_into_view_if_needed()
    page.wait_for_function(
        """() => { const el = document.querySelector('.panel-chart[data-panel="push_failures"]');
        return (el.data || []).some((t) => t.meta && t.meta.role === 'line'); }"""
    )
    modes = page.evaluate(
        """() => document.querySelector('.panel-chart[data-panel="push_failures"]').data
        .filter((t) => t.meta && t.meta.role === 'line').map((t) => [t.x.length, t.mode])"""
    )
    assert modes == [[1, "lines+markers"]]
    assert page.locator(".panel-chart[data-panel='push_failures'] .scatterlayer .point").count() == 1
