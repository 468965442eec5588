"""Fork from a checkpoint in a real browser: the run page lists the parent's checkpoints with
"Fork from here"; the click opens the new-experiment form pre-filled with the parent's config and
init.from_run / init.from_step; queuing it records the lineage, shown on both runs' pages."""
import re

import pytest
from playwright.sync_api import expect

from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create, run_transition
from trainer import checkpoint as ckpt

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_fork_from_here_prefills_the_form_and_links_parent_and_child(browser_page, live_url, alice, tiny_config, tmp_path, settings):
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
