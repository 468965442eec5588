"""Text that stays text: Plotly reads the strings it draws as a subset of HTML, so a config key
logged through the SDK as `<a href=...>` would be drawn as a real link on the experiment page's
sweep chart. Every label the charts hand Plotly is escaped; the key is drawn as the text it is."""

import json

import pytest
from django.test import Client
from playwright.sync_api import expect

from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import Run
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import points

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
LINK_KEY = '<a href="https://evil.example/login">Session expired - sign in</a>'
BOLD_VALUE = "<b>loud</b> & clear"

# Every text Plotly drew in the sweep's two charts, and whether any of it became markup.
READ_CHARTS = """() => ['glance-parcoords', 'glance-scatter'].map((id) => {
  const root = document.getElementById(id);
  return {
    links: root.querySelectorAll('svg a, svg [href], svg [*|href]').length,
    bold: root.querySelectorAll('svg text [style*="font-weight:bold"], svg text b').length,
    text: [...root.querySelectorAll('svg text')].map((t) => t.textContent).join(' | '),
  };
})"""


def open_sdk_run(token: str, client_id: str, config: dict) -> Run:
    body = {
        "client_id": client_id,
        "name": f"run-{client_id[-1]}",
        "project": "lab",
        "group": "markup",
        "config": config,
    }
    answer = Client().post(
        "/api/v1/sdk/runs", json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert answer.status_code == 201, answer.content
    return Run.objects.get(pk=answer.json()["id"])


def test_a_config_key_with_a_link_is_drawn_as_text_on_the_sweep_chart(browser_page, alice):
    _, token = logging_token_create(user=alice)
    runs = [
        open_sdk_run(token, f"markup-run-{i}", {LINK_KEY: i, "optim": {"note": BOLD_VALUE if i else "plain"}})
        for i in range(2)
    ]
    assert runs[0].experiment_id == runs[1].experiment_id
    for i, run in enumerate(runs):
        metrics_ingest(run=run, attempt=1, points=points("train/reward_mean", range(10), lambda s, i=i: s * (i + 1)))

    page = browser_page
    page.goto(f"/experiments/{runs[0].experiment_id}/", wait_until="domcontentloaded", timeout=60_000)
    page.locator("#sweep-glance").scroll_into_view_if_needed()  # drawn when it comes near
    expect(page.locator("#sweep-glance")).to_have_attribute("data-ready", "1", timeout=30_000)
    expect(page.locator("#sweep-glance .glance-note")).to_contain_text("2 run(s) on 2 axis(es)")
    page.select_option("#sweep-glance select[name=axis]", "optim.note")  # the scatter's x: the markup value
    page.wait_for_function("() => document.querySelector('#glance-scatter .xtitle')?.textContent === 'optim.note'")

    parcoords, scatter = page.evaluate(READ_CHARTS)
    assert parcoords["links"] == 0 and scatter["links"] == 0
    assert parcoords["bold"] == 0 and scatter["bold"] == 0
    assert LINK_KEY in parcoords["text"]  # the axis label, character for character
    assert BOLD_VALUE in parcoords["text"] and BOLD_VALUE in scatter["text"]  # a tick label each

    page.select_option("#sweep-glance select[name=axis]", LINK_KEY)  # now the key is the scatter's axis title
    page.wait_for_function(
        "(key) => document.querySelector('#glance-scatter .xtitle')?.textContent === key", arg=LINK_KEY
    )
    parcoords, scatter = page.evaluate(READ_CHARTS)
    assert scatter["links"] == 0 and LINK_KEY in scatter["text"]
    assert page.console_errors == [] and page.http_errors == []
