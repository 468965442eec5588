"""An SDK run's page in Chromium: its own keys, odd ones included, are drawn as panels grouped by
prefix, and no panel of the bundled trainer waits with "no data yet". The page is screenshotted
(always into the run's var folder, and to $OPL_SCREENS_DIR when set) for a person to look at."""

import json
import os
from pathlib import Path

import pytest
from django.test import Client

from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import Run
from orchestrator.metrics.panels import logged_key_panel_id
from orchestrator.metrics.services import metrics_ingest
from tests.browser.test_panels_story import traces, wait_drawn
from tests.unit.metrics.helpers import points

pytestmark = pytest.mark.browser

KEYS = [
    "train/loss",
    "train/rewards/<lambda>/mean",
    'eval/Accuracy "val" (%)',
    "lr",
    "training/off_policy/trajectory_staleness/mean",
]


def test_an_sdk_runs_page_draws_its_own_keys_and_no_empty_bundled_panel(page_as, alice, server, tmp_path):
    _, logging_token = logging_token_create(user=alice)
    body = {"client_id": "client-browser-1", "name": "wandb-style", "project": "lab", "config": {"lr": 0.001}}
    opened = (
        Client()
        .post(
            "/api/v1/sdk/runs",
            json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {logging_token}",
        )
        .json()
    )
    rows = [p for i, key in enumerate(KEYS) for p in points(key, range(1, 30), value=lambda s, i=i: i + s / 30)]
    run = Run.objects.get(pk=opened["id"])
    assert metrics_ingest(run=run, attempt=run.attempt, points=rows) == len(rows)

    page = page_as(alice)
    page.goto(f"{server}/runs/{opened['id']}/")
    for key in ("train/rewards/<lambda>/mean", 'eval/Accuracy "val" (%)', "lr"):
        panel = logged_key_panel_id(key)
        wait_drawn(page, panel)
        # trace names go to Plotly escaped for its markup (static/js/plotly_text.js): drawn as typed
        plotly_text = key.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        assert [t["name"] for t in traces(page, panel) if t["role"] == "line"] == [plotly_text]
    wait_drawn(page, "staleness")  # verl's staleness, read as the product's
    groups = page.locator("[data-panels] h3.panel-group").all_inner_texts()
    assert groups[-3:] == ["eval", "train", "Charts"]
    empty = page.evaluate(
        """() => [...document.querySelectorAll('.panel-chart')].filter((el) =>
            ((el.layout && el.layout.annotations) || []).some((a) => a.text === 'no data yet'))
            .map((el) => el.dataset.panel)"""
    )
    assert empty == []
    html = page.content()
    assert "Clone and edit" not in html and "Token fraction" not in html
    for folder in (tmp_path, os.environ.get("OPL_SCREENS_DIR")):
        if folder:
            page.screenshot(path=str(Path(folder) / "sdk-run-page.png"), full_page=True)
    assert (tmp_path / "sdk-run-page.png").stat().st_size > 10_000
