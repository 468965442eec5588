"""The pages apply a saved view: ?view=<id> on the run, compare and experiment pages, else the
project's default view on its runs' pages; /views/<id>/ opens the page the view was saved from."""

import pytest
from django.urls import reverse

from orchestrator.workspace.services import view_create
from tests.unit.metrics.test_pages import config_json

pytestmark = pytest.mark.django_db
STATE = {"panels": [{"id": "k-actor_pg_loss", "title": "", "keys": ["actor/pg_loss"], "log_y": True, "x": None}]}


@pytest.fixture
def lab(alice, tiny_config):
    from orchestrator.experiments.services import experiment_create

    experiment = experiment_create(owner=alice, name="e", project="lab", config=tiny_config, seeds=2)
    return experiment, list(experiment.runs.order_by("id"))


def test_the_run_page_applies_the_asked_view_else_the_projects_default(client, alice, lab):
    experiment, runs = lab
    client.force_login(alice)
    plain = config_json(client.get(reverse("exp-run-detail", args=[runs[0].pk])), "run-metrics-config")
    assert plain["views"]["current"] is None and plain["views"]["project"] == "lab"
    default = view_create(project=experiment.project, owner=alice, name="d", state=STATE, default=True)
    other = view_create(project=experiment.project, owner=alice, name="o", state={"smooth": 0.3})
    applied = config_json(client.get(reverse("exp-run-detail", args=[runs[1].pk])), "run-metrics-config")
    assert applied["views"]["current"]["id"] == default.pk  # a run the view was not saved from
    asked = client.get(reverse("exp-run-detail", args=[runs[0].pk]), {"view": other.pk})
    assert config_json(asked, "run-metrics-config")["views"]["current"]["state"]["smooth"] == 0.3
    assert client.get(reverse("exp-run-detail", args=[runs[0].pk]), {"view": 999999}).status_code == 404
    assert client.get(reverse("exp-run-detail", args=[runs[0].pk]), {"view": "x"}).status_code == 404


def test_the_compare_and_experiment_pages_apply_a_view(client, alice, lab):
    experiment, runs = lab
    client.force_login(alice)
    view = view_create(project=experiment.project, owner=alice, name="v", state=STATE)
    compare = client.get(reverse("metrics-compare"), {"runs": f"{runs[0].pk},{runs[1].pk}", "view": view.pk})
    assert config_json(compare, "compare-config")["views"]["current"]["id"] == view.pk
    page = client.get(reverse("exp-experiment-detail", args=[experiment.pk]), {"view": view.pk})
    assert config_json(page, "compare-config")["views"]["current"]["id"] == view.pk


def test_a_views_link_opens_its_page(client, alice, charlie, lab):
    experiment, runs = lab
    client.force_login(alice)
    cases = [
        (f"run:{runs[0].pk}", {}, f"/runs/{runs[0].pk}/?view="),
        (f"experiment:{experiment.pk}", {}, f"/experiments/{experiment.pk}/?view="),
        ("compare", {"runs": [runs[1].pk, runs[0].pk]}, f"/compare/?runs={runs[1].pk},{runs[0].pk}&view="),
        ("compare", {"experiments": [experiment.pk]}, f"/compare/?experiment={experiment.pk}&view="),
    ]
    for i, (page, state, target) in enumerate(cases):
        view = view_create(project=experiment.project, owner=alice, name=f"v{i}", state=state, page=page)
        answer = client.get(reverse("workspace-view-open", args=[view.pk]))
        assert answer.status_code == 302 and answer["Location"] == f"{target}{view.pk}"
    client.force_login(charlie)
    assert client.get(reverse("workspace-view-open", args=[view.pk])).status_code == 404
