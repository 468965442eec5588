"""Fork from a checkpoint in a real browser: the run page lists the parent's checkpoints with
"Fork from here"; the click opens the new-experiment form pre-filled with the parent's config and
init.from_run / init.from_step; queuing it records the lineage, shown on both runs' pages. The
compare page draws a fork from its parent's step."""

import re

import pytest
from playwright.sync_api import expect

from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create, run_transition
from trainer.ckpt import checkpoint as ckpt

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_fork_from_here_prefills_the_form_and_links_parent_and_child(
    browser_page, live_url, alice, tiny_config, tmp_path, settings
):
    settings.RUNS_DIR = tmp_path / "runs"  # the live server's thread reads the same settings
    tiny_config["algorithm"]["lr"] = 0.0003
    parent = experiment_create(owner=alice, name="warm", project="lab", config=tiny_config).runs.get()
    for step in (2, 4, 8):
        folder = settings.RUNS_DIR / f"run-{parent.pk}" / "ckpt" / f"step-{step:08d}"
        folder.mkdir(parents=True)
        (folder / "state.pt").write_bytes(b"w" * 1000)
        ckpt.write_meta(folder, step, {})
    for state in (Run.State.SUBMITTED, Run.State.RUNNING, Run.State.SUCCEEDED):
        run_transition(run=parent, to=state)

    page = browser_page
    page.goto(f"/runs/{parent.pk}/")
    rows = page.locator("#checkpoint-table tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text("8")
    page.locator("#checkpoint-table a[data-fork-step='4']").click()

    expect(page).to_have_url(re.compile(rf"/experiments/new/\?fork={parent.pk}&step=4$"))
    expect(page.locator("#f-name")).to_have_value("warm-from-4")
    expect(page.locator("#f-project")).to_have_value("lab")
    expect(page.locator("#f-init__from_run")).to_have_value(str(parent.pk))
    expect(page.locator("#f-init__from_step")).to_have_value("4")
    expect(page.locator("#f-init__optimizer")).to_have_value("false")  # weights only by default
    expect(page.locator("#f-algorithm__lr")).to_have_value("0.0003")  # the parent's config
    expect(page.locator("#run-count")).to_have_text("1 run")

    page.select_option("#f-init__optimizer", "true")
    page.click("#queue-button")
    expect(page).to_have_url(re.compile(r"/experiments/\d+/$"))
    child = Run.objects.get(name="warm-from-4")
    assert (child.parent_id, child.parent_step, child.config["init"]["optimizer"]) == (parent.pk, 4, True)

    page.goto(f"/runs/{child.pk}/")
    expect(page.locator("#lineage-parent")).to_contain_text("at update 4")
    expect(page.locator("#lineage-parent")).to_contain_text("with its optimizer state")
    page.click("#lineage-parent a")
    expect(page).to_have_url(f"{live_url}/runs/{parent.pk}/")
    expect(page.locator("#lineage-children")).to_contain_text("warm-from-4")
    expect(page.locator("#checkpoint-table tr[data-step='4']")).to_contain_text(f"pinned by run {child.pk}")
    assert page.console_errors == [] and page.http_errors == []


def _line_ranges(page) -> dict[int, tuple[float, float]]:
    """{run id: (first x, last x)} of the reward panel's line traces, read from Plotly's data."""
    return {
        int(k): tuple(v)
        for k, v in page.evaluate("""() => {
        const el = document.querySelector('.panel-chart[data-panel="reward"]');
        const out = {};
        for (const t of (el && el.data) || [])
            if (t.meta && t.meta.role === "line") out[t.meta.run] = [t.x[0], t.x[t.x.length - 1]];
        return out;
    }""").items()
    }


def test_compare_draws_a_fork_from_its_parents_step(page_as, server, alice, tiny_config, settings, tmp_path):
    from orchestrator.metrics.services import metrics_ingest
    from tests.unit.metrics.helpers import points

    settings.RUNS_DIR = tmp_path / "runs"
    parent = experiment_create(owner=alice, name="warm", config=tiny_config).runs.get()
    child = experiment_create(
        owner=alice, name="fork", config={**tiny_config, "init": {"from_run": parent.pk, "from_step": 4}}
    ).runs.get()
    metrics_ingest(run=parent, attempt=1, points=points("train/reward_mean", range(1, 9)))
    metrics_ingest(run=child, attempt=1, points=points("train/reward_mean", range(1, 6)))
    page = page_as(alice)
    page.goto(f"{server}/compare/?runs={parent.pk},{child.pk}")
    page.wait_for_selector("#compare[data-ready='1']")
    assert _line_ranges(page) == {parent.pk: (1, 8), child.pk: (1, 5)}  # each on its own updates

    page.check("[data-control=lineage]")
    assert _line_ranges(page) == {parent.pk: (1, 8), child.pk: (5, 9)}  # the fork continues from update 4
    page.check("[data-control=upto]")
    assert _line_ranges(page) == {parent.pk: (1, 4), child.pk: (5, 9)}  # the parent up to the fork
    assert "lineage=1" in page.url and "upto=1" in page.url

    page.goto(page.url)  # the link restores the view
    page.wait_for_selector("#compare[data-ready='1']")
    assert _line_ranges(page) == {parent.pk: (1, 4), child.pk: (5, 9)}
