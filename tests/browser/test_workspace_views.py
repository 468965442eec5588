"""Every logged key chartable and saved views, in headless Chromium against uvicorn:
a run with 60 keys, three non-default keys added as panels from the key browser (two sharing one
panel, one on a log axis), the view saved, reloaded and opened by a second member from its link;
a user without access gets a 404. Screenshots of the changed pages at 1,440 and 1,024 px."""

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from tests.browser.test_charts import line_points, push_off_loop
from tests.browser.test_layout_widths import no_sideways_scroll, shot
from tests.unit.metrics.helpers import make_run, points, start_attempt

pytestmark = pytest.mark.browser
CURATED = ["train/reward_mean", "actor/m2", "actor/clip_frac", "actor/entropy", "rollout/staleness_mean"]
EXTRA = ["actor/pg_loss", "actor/ratio_max", "actor/ratio_min"] + [f"custom/k{i:02d}" for i in range(52)]
KEYS = CURATED + EXTRA  # 60


def log_keys(run, keys=KEYS, steps=range(40)):
    batch = []
    for i, key in enumerate(keys):
        batch += points(key, steps, lambda s, i=i: 1 + i + s / 10)
    metrics_ingest(run=run, attempt=1, points=batch)


def panels_on(page):
    """[(panel id, keys drawn as lines, y-axis type)] of every drawn panel, in page order."""
    return page.evaluate("""() => [...document.querySelectorAll('.metric-panel')].map((p) => {
        const el = p.querySelector('.panel-chart');
        const lines = (el.data || []).filter((t) => t.meta && t.meta.role === 'line').map((t) => t.meta.key);
        return [p.dataset.panel, lines, el.layout ? el.layout.yaxis.type : null];
    })""")


def wait_drawn(page, panel_id, lines=1):
    """Until the panel draws `lines` lines (a group's mean line on a grouped page)."""
    page.wait_for_function(
        """([id, n]) => { const el = document.querySelector(`.panel-chart[data-panel="${id}"]`);
        const drawn = (el && el.data || []).filter((t) => t.meta && ['line', 'mean'].includes(t.meta.role));
        return drawn.length >= n; }""",
        arg=[panel_id, lines],
    )


def scroll_through_added(page):
    """The added panels sit below the curated ones: each draws once scrolled near (lazy)."""
    for panel_id, lines in (("k-actor_pg_loss", 2), ("k-custom_k07", 1), ("k-actor_ratio_max", 1)):
        page.locator(f".metric-panel[data-panel='{panel_id}']").scroll_into_view_if_needed()
        wait_drawn(page, panel_id, lines)


def test_any_key_becomes_a_panel_and_a_saved_view_is_shared_by_its_link(
    page_as, server, alice, bob, charlie, tiny_config
):
    run, _ = make_run(alice, tiny_config)
    run.experiment.project.members.add(bob)
    log_keys(run)
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    wait_drawn(page, "reward")
    assert "(60, " in page.inner_text("[data-key-browser] summary")  # every logged key is listed
    groups = page.eval_on_selector_all(
        "[data-key-browser] .key-group h4", "els => els.map((e) => e.firstChild.textContent.trim())"
    )
    assert groups == ["actor/", "custom/", "rollout/", "train/"]

    page.fill("[data-control=key-search]", "pg_lo")  # the search narrows the list to the key
    visible = page.eval_on_selector_all("[data-key-browser] li:not([hidden])", "els => els.map((e) => e.dataset.key)")
    assert visible == ["actor/pg_loss"]
    page.click("[data-add-key='actor/pg_loss']")
    wait_drawn(page, "k-actor_pg_loss")
    page.fill("[data-control=key-search]", "k07")
    page.click("[data-add-key='custom/k07']")
    wait_drawn(page, "k-custom_k07")
    # a second key shares the pg_loss panel; the ratio panel gets a log y axis
    page.fill("[data-control=key-search]", "")
    page.click("[data-add-key='actor/ratio_max']")
    wait_drawn(page, "k-actor_ratio_max")
    ratio = page.locator(".metric-panel[data-panel='k-actor_ratio_max']")
    ratio.locator("[data-panel-control=logy]").check()
    pg = page.locator(".metric-panel[data-panel='k-actor_pg_loss']")
    pg.locator("[data-panel-control=add-key] input").fill("actor/ratio_min")
    pg.locator("[data-panel-control=add-key] input").press("Enter")
    wait_drawn(page, "k-actor_pg_loss", lines=2)
    before = panels_on(page)
    added = [p for p in before if p[0].startswith("k-")]
    assert added == [
        ["k-actor_pg_loss", ["actor/pg_loss", "actor/ratio_min"], "linear"],
        ["k-custom_k07", ["custom/k07"], "linear"],
        ["k-actor_ratio_max", ["actor/ratio_max"], "log"],
    ]

    page.fill("[data-control=view-name]", "pg-and-ratios")
    page.click("[data-action=save-view]")
    page.wait_for_selector("[data-views][data-saved]")
    view_id = int(page.get_attribute("[data-views]", "data-saved"))
    assert f"view={view_id}" in page.url
    page.reload()
    scroll_through_added(page)
    assert [p for p in panels_on(page) if p[0].startswith("k-")] == added
    assert page.eval_on_selector("[data-control=view]", "el => el.selectedOptions[0].textContent") == "pg-and-ratios"

    other = page_as(bob)  # a member opens the view's link: the run page with the same panels
    other.goto(f"{server}/views/{view_id}/")
    assert other.url.endswith(f"/runs/{run.pk}/?view={view_id}")
    scroll_through_added(other)
    assert panels_on(other) == panels_on(page)

    outsider = page_as(charlie)
    assert outsider.goto(f"{server}/views/{view_id}/").status == 404
    assert outsider.goto(f"{server}/runs/{run.pk}/?view={view_id}").status == 404


def test_the_compare_page_charts_any_key_with_the_raw_line_under_the_smoothed_one(page_as, server, alice, tiny_config):
    experiment = experiment_create(
        owner=alice, name="sweep", config=tiny_config, sweep={"algorithm.objective": ["m2po", "grpo"]}, seeds=1
    )
    for run in experiment.runs.all():
        log_keys(run, CURATED + ["actor/pg_loss"])
    page = page_as(alice)
    page.goto(f"{server}/compare/?experiment={experiment.pk}")
    page.wait_for_selector("#compare[data-ready='1']")
    page.click("[data-add-key='actor/pg_loss']")
    wait_drawn(page, "k-actor_pg_loss", lines=2)
    page.fill("[data-control=smooth]", "0.8")
    page.dispatch_event("[data-control=smooth]", "input")
    roles = page.evaluate("""() => document.querySelector('.panel-chart[data-panel="k-actor_pg_loss"]').data
        .map((t) => t.meta && t.meta.role)""")
    assert roles.count("raw") == 2 and roles.count("line") == 2
    raw = page.evaluate("""() => document.querySelector('.panel-chart[data-panel="k-actor_pg_loss"]').data
        .find((t) => t.meta.role === 'raw').opacity""")
    assert raw < 0.5  # faint

    # a view of this page keeps the grouping, the smoothing and the added panel
    page.select_option("[data-control=group]", "algorithm.objective")
    page.fill("[data-control=view-name]", "grouped")
    page.click("[data-action=save-view]")
    page.wait_for_selector("[data-views][data-saved]")
    view_id = page.get_attribute("[data-views]", "data-saved")
    page.goto(f"{server}/compare/?experiment={experiment.pk}&view={view_id}")
    page.wait_for_selector("#compare[data-ready='1']")
    assert page.eval_on_selector("[data-control=group]", "el => el.value") == "algorithm.objective"
    assert page.eval_on_selector("[data-control=smooth]", "el => el.value") == "0.8"
    page.locator(".metric-panel[data-panel='k-actor_pg_loss']").scroll_into_view_if_needed()
    wait_drawn(page, "k-actor_pg_loss", lines=2)  # one mean line per group


@pytest.mark.parametrize("width", (1440, 1024))
def test_the_workspace_fits_the_window(page_as, server, alice, tiny_config, width):
    experiment = experiment_create(
        owner=alice, name="sweep", config=tiny_config, sweep={"algorithm.objective": ["m2po", "grpo"]}, seeds=1
    )
    runs = [start_attempt(run, 1)[0] for run in experiment.runs.order_by("id")]  # running, not queued
    for run in runs:
        log_keys(run)
    page = page_as(alice)
    page.set_viewport_size({"width": width, "height": 900})
    for name, url, ready in [
        ("workspace-run", f"/runs/{runs[0].pk}/", ".panel-chart[data-panel=reward] .main-svg"),
        ("workspace-compare", f"/compare/?experiment={experiment.pk}", "#compare[data-ready='1']"),
        ("workspace-experiment", f"/experiments/{experiment.pk}/", "#compare[data-ready='1']"),
    ]:
        page.goto(server + url)
        page.wait_for_selector(ready)
        page.click("[data-add-key='actor/pg_loss']")
        wait_drawn(page, "k-actor_pg_loss")
        no_sideways_scroll(page, name)
        shot(page, f"{name}-{width}")


def test_a_saved_views_added_panels_keep_their_history_on_a_live_run(page_as, server, client, alice, tiny_config):
    """Panels added to a running run, saved as a view and picked from the menu: once points arrive
    while they are still below the fold, scrolling to them shows the whole history, not only what
    arrived after the page loaded."""

    run, token = make_run(alice, tiny_config)
    log_keys(run, steps=range(300))
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    wait_drawn(page, "reward")
    for key in ("actor/ratio_max", "actor/ratio_min"):
        page.fill("[data-control=key-search]", key)
        page.click(f"[data-add-key='{key}']")
        wait_drawn(page, f"k-{key.replace('/', '_')}")
    page.fill("[data-control=view-name]", "ratios")
    page.click("[data-action=save-view]")
    page.wait_for_selector("[data-views][data-saved]")
    view_id = page.get_attribute("[data-views]", "data-saved")

    page.goto(f"{server}/runs/{run.pk}/")  # the curated panels, then the view picked from the menu
    wait_drawn(page, "reward")
    page.select_option("[data-control=view]", view_id)
    page.wait_for_url(f"**view={view_id}")
    page.wait_for_function("() => document.querySelector('[data-show=live]').textContent.includes('live')")
    assert page.evaluate("() => window.scrollY") == 0
    below = page.evaluate(
        """() => document.querySelector('.metric-panel[data-panel="k-actor_ratio_max"]').getBoundingClientRect().top"""
    )
    assert below > 1000 + 400  # not near the viewport: it loads when scrolled to

    for start in range(300, 330, 10):  # the trainer goes on posting
        batch = []
        for i, key in enumerate(KEYS):
            batch += points(key, range(start, start + 10), lambda s, i=i: 1 + i + s / 10)
        assert push_off_loop(client, run.pk, token, {"points": batch}).status_code == 202
    page.wait_for_function("() => Number(document.getElementById('run-metrics').dataset.lastEvent || 0) > 0")
    page.wait_for_function(
        """() => { const line = (document.querySelector('.panel-chart[data-panel="reward"]').data || [])
            .find((t) => t.meta && t.meta.role === 'line'); return line && line.x.includes(329); }"""
    )
    for panel_id in ("k-actor_ratio_max", "k-actor_ratio_min"):
        page.locator(f".metric-panel[data-panel='{panel_id}']").scroll_into_view_if_needed()
        page.wait_for_function(
            """(id) => { const el = document.querySelector(`.panel-chart[data-panel="${id}"]`);
            const line = (el.data || []).find((t) => t.meta && t.meta.role === 'line');
            return line && line.x.includes(329); }""",
            arg=panel_id,
        )
        assert line_points(page, panel_id) == [list(range(330))], panel_id
