"""One notion of step: optimizer updates and training steps are named wherever a page
shows progress or staleness, and the sweep preview explains s = k x updates per step."""

import pytest

from orchestrator.experiments.progress import progress, staleness_updates
from orchestrator.experiments.services import experiment_create
from orchestrator.web.experiment_form import flat_from_spec


def test_progress_names_updates_and_training_steps():
    config = {"algorithm": {"updates_per_step": 2, "epochs": 1}, "train": {"steps": 600}}
    assert progress(1200, 1200, config)["text"] == "update 1200 / 1200 · step 600 / 600"
    assert progress(0, None, config)["text"] == "update 0 / 1200 · step 0 / 600"  # queued: total from the config
    two_epochs = {"algorithm": {"updates_per_step": 2, "epochs": 2}, "train": {"steps": 10}}
    assert progress(8, None, two_epochs) == {
        "updates": 8,
        "total_updates": 40,
        "steps": 2,
        "total_steps": 10,
        "updates_per_step": 4,
        "text": "update 8 / 40 · step 2 / 10",
    }


def test_staleness_in_updates_is_k_times_updates_per_step():
    assert (
        staleness_updates({"algorithm": {"updates_per_step": 2, "epochs": 1}, "staleness": {"mode": "stale_k", "k": 4}})
        == "8 = 4 × 2"
    )
    assert staleness_updates({"staleness": {"mode": "async", "max_staleness": 16}}) == "≤ 16"


@pytest.mark.django_db
def test_preview_explains_why_k4_runs_are_named_s8(client, alice):
    client.force_login(alice)
    data = flat_from_spec(
        {
            "name": "exp",
            "project": "lab",
            "config": {
                "model": {"name": "tiny"},
                "train": {"device": "cpu", "steps": 4},
                "algorithm": {"updates_per_step": 2},
            },
        }
    )
    data.update({"sweep-0-field": "staleness.k", "sweep-0-mode": "list", "sweep-0-values": "0, 4"})
    html = client.post("/experiments/preview", data).content.decode()
    assert 'id="preview-staleness"' in html and "s = k × updates/step" in html
    assert "s8" in html and '<td class="staleness-s">8 = 4 × 2</td>' in html
    assert 'id="staleness-help"' in client.get("/experiments/new/").content.decode()


@pytest.mark.django_db
def test_run_pages_show_progress_in_updates_and_steps(client, alice, tiny_config):
    run = experiment_create(owner=alice, name="one", config=tiny_config).runs.get()  # steps 4 x 2 updates
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "update 0 / 8 · step 0 / 4" in page
    table = client.get("/").content.decode()
    assert ">0/8</td>" in table and 'title="update 0 / 8 · step 0 / 4"' in table
