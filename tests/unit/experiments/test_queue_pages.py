"""Queue transparency on pages: a queued run shows its place and what holds it, in the
runs table and on its page, instead of "–", "attempt 0 of 3" and empty charts."""

import pytest

from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create, run_transition

pytestmark = pytest.mark.django_db


def test_a_queued_runs_page_shows_its_place_instead_of_empty_charts(client, alice, tiny_config, settings):
    settings.MAX_ACTIVE_RUNS = 1
    busy = experiment_create(owner=alice, name="busy", config=tiny_config).runs.get()
    run_transition(run=busy, to=Run.State.SUBMITTED)
    runs = list(
        experiment_create(owner=alice, name="w", config=tiny_config, sweep={"train.steps": [1, 2, 3]}).runs.order_by(
            "id"
        )
    )
    client.force_login(alice)
    page = client.get(f"/runs/{runs[2].pk}/").content.decode()
    assert 'id="queue-note"' in page and "3rd; waiting: cluster full 1/1" in page
    assert "data-panels hidden" in page
    assert "attempt 0 of" not in page and "not started yet (up to 3 attempts)" in page
    table = client.get("/").content.decode()
    assert "1st; waiting: cluster full 1/1" in table and "2nd; waiting: cluster full 1/1" in table


def test_a_started_runs_page_has_charts_and_one_exit_code(client, alice, tiny_config):
    run = experiment_create(owner=alice, name="one", config=tiny_config).runs.get()
    run_transition(run=run, to=Run.State.SUBMITTED)
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="queue-note"' not in page and "data-panels>" in page
    assert page.count("Exit code") <= 1
