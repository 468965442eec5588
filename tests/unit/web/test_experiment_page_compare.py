"""Experiment pages that compare: the runs' charts embedded and grouped by the swept
field, counts by every state (cancelled too), and "compare all"."""

import json

import pytest

from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create, run_stop
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import points

pytestmark = pytest.mark.django_db


def embedded_config(html):
    start = html.index('id="compare-config"')
    start = html.index(">", start) + 1
    return json.loads(html[start : html.index("</script>", start)])


def test_experiment_page_embeds_the_grouped_charts_of_its_runs(client, alice, tiny_config):
    experiment = experiment_create(
        owner=alice, name="sweep", config=tiny_config, sweep={"staleness.k": [0, 4]}, seeds=2
    )
    for run in experiment.runs.all():
        metrics_ingest(run=run, attempt=1, points=points("train/reward_mean", range(5)))
    client.force_login(alice)
    html = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert 'id="experiment-charts"' in html and "Charts of all 4 runs" in html
    cfg = embedded_config(html)
    assert cfg["embedded"] is True and cfg["default_group"] == "staleness.k"
    assert sorted(r["id"] for r in cfg["runs"]) == sorted(experiment.runs.values_list("id", flat=True))
    assert f'href="/compare/?experiment={experiment.pk}"' in html  # compare all


def test_counts_include_cancelled_runs(client, alice, tiny_config):
    experiment = experiment_create(owner=alice, name="one", config=tiny_config)
    run_stop(run=experiment.runs.get())
    assert experiment.runs.get().state == Run.State.CANCELLED
    client.force_login(alice)
    detail = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert "1 · 1 cancelled" in detail
    listing = client.get("/experiments/").content.decode()
    assert (
        "<th>Cancelled</th>" in listing
        and '<span class="state sweep-ended" title="all its runs have ended">ended</span>' in listing
    )
    # runs, queued, active, succeeded, failed, cancelled
    assert (
        "<td>1</td>\n      <td>0</td>\n      <td>0</td>\n      <td>0</td>\n      <td>0</td>\n      <td>1</td>"
        in listing
    )
