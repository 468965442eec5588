"""The M2 panel reads at a glance: its three noisy series are drawn smoothed by default, the raw
lines faint beneath, with the tau line on top; other panels keep their exact values, and a
smoothing the user sets wins over the panel's default."""

import math

import pytest

from orchestrator.metrics.services import metrics_ingest
from tests.browser.test_panels_story import wait_drawn
from tests.unit.metrics.helpers import make_run, points

pytestmark = pytest.mark.browser

STEPS = range(400)


def noisy(base, spread):
    """A deterministic zig-zag around `base`: every other point `spread` times higher."""
    return lambda s: base * (spread if s % 2 else 1.0)


def drawn(page, panel):
    return page.evaluate(
        """(panel) => {
        const el = document.querySelector(`.panel-chart[data-panel="${panel}"]`);
        return {
            range: el.layout.yaxis.range,
            traces: el.data.map((t) => ({name: t.name, role: t.meta && t.meta.role, key: t.meta && t.meta.key,
                y: t.y, opacity: t.opacity === undefined ? 1 : t.opacity})),
        };
    }""",
        panel,
    )


def wiggle(ys):
    """How much a line zig-zags: the mean jump between neighbours, in log10 (the M2 axis is log)."""
    logs = [math.log10(y) for y in ys if y]
    return sum(abs(b - a) for a, b in zip(logs, logs[1:], strict=False)) / (len(logs) - 1)


def test_the_m2_panel_is_smoothed_by_default_with_tau_drawn_above_it(page_as, alice, tiny_config, server):
    tiny_config["algorithm"]["tau_m2"] = 0.04
    run, _ = make_run(alice, tiny_config)
    rows = (
        points("actor/m2", STEPS, noisy(0.03, 8.0))
        + points("actor/m2_after", STEPS, noisy(0.02, 3.0))
        + points("actor/m2_all", STEPS, noisy(0.05, 8.0))
        + points("train/reward_mean", STEPS, noisy(0.3, 2.0))
    )
    metrics_ingest(run=run, attempt=1, points=rows)
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    wait_drawn(page, "m2")

    m2 = drawn(page, "m2")
    lines = {t["key"]: t for t in m2["traces"] if t["role"] == "line"}
    raws = {t["key"]: t for t in m2["traces"] if t["role"] == "raw"}
    assert sorted(lines) == sorted(raws) == ["actor/m2", "actor/m2_after", "actor/m2_all"]
    for key, line in lines.items():
        assert wiggle(line["y"]) < wiggle(raws[key]["y"]) / 4, key  # smoothed, not the raw zig-zag
        assert raws[key]["opacity"] < 0.5  # the raw line stays, faint, beneath
    assert page.inner_text("#run-metrics [data-show=smooth]") == "panel default"

    # tau: drawn last (above every series), inside the log axis' range, named in the legend
    assert m2["traces"][-1]["role"] == "threshold" and m2["traces"][-1]["name"] == "τ = 0.04"
    low, high = m2["range"]
    assert low < math.log10(0.04) < high

    # the reward panel keeps its exact values: no panel default there
    wait_drawn(page, "reward")
    reward = drawn(page, "reward")["traces"]
    assert [t["role"] for t in reward] == ["line"]
    assert reward[0]["y"] == [noisy(0.3, 2.0)(s) for s in STEPS]

    # a smoothing the user sets wins: 0 draws M2 raw
    page.evaluate("""() => {
        const slider = document.querySelector('#run-metrics [data-control=smooth]');
        slider.value = '0';
        slider.dispatchEvent(new Event('input'));
    }""")
    page.wait_for_function("""() => !document.querySelector('.panel-chart[data-panel=m2]').data
        .some((t) => t.meta && t.meta.role === 'raw')""")
    after = {t["key"]: t["y"] for t in drawn(page, "m2")["traces"] if t["role"] == "line"}
    assert after["actor/m2"] == [noisy(0.03, 8.0)(s) for s in STEPS]


def test_the_compare_page_smooths_m2_by_default_and_keeps_an_explicit_zero(page_as, alice, tiny_config, server):
    run, _ = make_run(alice, tiny_config)
    metrics_ingest(
        run=run,
        attempt=1,
        points=points("actor/m2", STEPS, noisy(0.03, 8.0)) + points("train/reward_mean", STEPS, noisy(0.3, 2.0)),
    )
    page = page_as(alice)
    page.goto(f"{server}/compare/?runs={run.pk}")
    page.wait_for_selector("#compare[data-ready='1']")
    wait_drawn(page, "m2")
    m2 = drawn(page, "m2")["traces"]
    [line] = [t for t in m2 if t["role"] == "line"]
    [raw] = [t for t in m2 if t["role"] == "raw"]
    assert wiggle(line["y"]) < wiggle(raw["y"]) / 4 and raw["opacity"] < 0.5
    wait_drawn(page, "reward")
    assert [t["role"] for t in drawn(page, "reward")["traces"]] == ["line"]

    page.goto(f"{server}/compare/?runs={run.pk}&smooth=0")  # a smoothing the URL sets wins
    page.wait_for_selector("#compare[data-ready='1']")
    wait_drawn(page, "m2")
    assert [t["role"] for t in drawn(page, "m2")["traces"] if t["role"] != "threshold"] == ["line"]
