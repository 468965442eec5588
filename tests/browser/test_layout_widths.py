"""Layout at 1,440 and 1,024 px: no page scrolls sideways, the runs table's
actions stay inside its card, the preview shows under the sweep, the preset dropdown follows the
form. Screenshots go to OPL_SCREENS_DIR (e.g. /work/notes/screens) for a person to compare."""

import os
from pathlib import Path

import pytest

from orchestrator.experiments.services import experiment_create

pytestmark = pytest.mark.browser
WIDTHS = (1440, 1024)


def shot(page, name):
    if folder := os.environ.get("OPL_SCREENS_DIR"):
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def no_sideways_scroll(page, name):
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    wide = page.evaluate("""() => [...document.querySelectorAll('body *')]
        .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1)
        .slice(0, 3).map((el) => el.tagName + '.' + el.className + '#' + el.id)""")
    assert width[0] <= width[1], f"{name}: page is {width[0]} px wide in a {width[1]} px window: {wide}"


@pytest.mark.parametrize("width", WIDTHS)
def test_pages_fit_the_window(page_as, server, alice, lab, width):
    experiment, runs = lab
    page = page_as(alice)
    page.set_viewport_size({"width": width, "height": 900})
    many_cols = "train/reward_mean,eval/avg_acc,actor/clip_frac,actor/m2,rollout/staleness_mean,perf/tokens_per_s"
    for name, url, ready in [
        ("runs", "/", "#runs"),
        ("runs-6-columns", f"/?cols={many_cols}&stat=tail_mean", "#runs"),
        ("run", f"/runs/{runs[0].pk}/", ".panel-chart[data-panel=reward] .main-svg"),
        ("queued-run", f"/runs/{runs[-1].pk}/", "#queue-note"),
        ("experiment", f"/experiments/{experiment.pk}/", "#compare[data-ready='1']"),
        ("compare", f"/compare/?experiment={experiment.pk}", "#compare[data-ready='1']"),
        ("new-experiment", "/experiments/new/", "#experiment-form"),
        ("experiments", "/experiments/", "table.runs"),
    ]:
        page.goto(server + url)
        page.wait_for_selector(ready)
        no_sideways_scroll(page, name)
        if name.startswith("runs"):  # the actions column is inside the table's card
            card = page.locator(".table-scroll").bounding_box()
            actions = page.locator("#runs tbody tr:first-child td.row-actions").bounding_box()
            inside_scroll = page.evaluate(
                "() => { const s = document.querySelector('.table-scroll'); return s.scrollWidth - s.clientWidth; }"
            )
            assert actions["x"] + actions["width"] <= card["x"] + card["width"] + 1  # sticky at the card's edge
            assert actions["x"] >= card["x"]
            if name == "runs":  # the default columns fit, at 1,024 px too: at most a scrollbar's width
                # inside the card. In the full suite these runs get dispatched and start while the test
                # runs (seen in CI: a running row's job id and start time made it 17 px wider); the page
                # itself never scrolls (no_sideways_scroll above).
                assert inside_scroll <= 24
            job = page.locator("#runs tbody td.job code").first.bounding_box()
            assert job is None or job["height"] < 24  # the job id stays on one line
        shot(page, f"{name}-{width}")


def test_the_preview_shows_under_the_sweep_and_the_preset_follows_the_form(page_as, server, alice):
    page = page_as(alice)
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(server + "/experiments/new/")
    assert page.eval_on_selector("#preset", "el => el.selectedOptions[0].textContent.trim()") == "— choose a preset —"
    first = page.eval_on_selector("#preset option:not([disabled])", "el => el.value")
    page.goto(f"{server}/experiments/new/?preset={first}")
    chosen = page.eval_on_selector("#preset", "el => el.selectedOptions[0].textContent.trim()")
    page.fill("[name='algorithm.lr']", "0.0005")
    assert page.eval_on_selector("#preset", "el => el.selectedOptions[0].textContent.trim()") == f"{chosen} (edited)"
    page.select_option("[name='sweep-0-field']", "staleness.k")
    page.fill("[name='sweep-0-values']", "0, 4")
    page.click("text=Preview runs")
    page.wait_for_selector("#preview-count")
    preview = page.locator("#preview").bounding_box()
    first_section = page.locator(".config-section").first.bounding_box()
    assert preview["y"] < first_section["y"]  # under the sweep, above the config sections
    assert (
        -5 <= page.evaluate("() => document.getElementById('preview').getBoundingClientRect().top") < 900
    )  # scrolled to it
    assert "s = k × updates/step" in page.inner_text("#preview")
    shot(page, "preview-1440")


def test_the_admin_is_branded_and_pages_have_an_icon(client, admin_user):
    client.force_login(admin_user)
    html = client.get("/admin/").content.decode()
    assert "OffPolicy Lab administration" in html and "Django administration" not in html
    assert 'rel="icon"' in client.get("/").content.decode()
    assert client.get("/static/favicon.svg").status_code == 200


def test_the_stdout_tail_opens_at_its_last_lines(page_as, server, alice, tiny_config, tmp_path):
    from orchestrator.experiments.models import Run as RunModel

    run = experiment_create(owner=alice, name="logs", config=tiny_config).runs.get()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "attempt-1.out").write_text("".join(f"[trainer] update {i}\n" for i in range(40)))
    RunModel.objects.filter(pk=run.pk).update(backend="local", run_dir=str(tmp_path), attempt=1, state="running")
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    page.wait_for_selector("#log-stdout")
    page.wait_for_function("""() => { const e = document.getElementById('log-stdout');
        return e.scrollHeight > e.clientHeight && e.scrollTop + e.clientHeight >= e.scrollHeight - 2; }""")
    assert "update 39" in page.inner_text("#log-stdout")
