"""The runs table marks runs whose alerts fired (counted inside the page's own query) and filters
them with `alert = <kind>` or `alert ~ ""` (any)."""

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import T0, start_attempt

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(alice, tiny_config):
    sweep = experiment_create(owner=alice, name="s", config=tiny_config, sweep={"train.seed": [1, 2, 3]})
    runs = [start_attempt(r, 1)[0] for r in sweep.runs.order_by("id")]
    metrics_ingest(
        run=runs[0],
        attempt=1,
        points=[
            {"step": 1, "key": "actor/grad_norm", "value": "NaN", "time": T0},
            {"step": 1, "key": "actor/entropy", "value": 0.0, "time": T0},
        ],
    )
    metrics_ingest(run=runs[1], attempt=1, points=[{"step": 1, "key": "actor/clip_frac", "value": 0.9, "time": T0}])
    return runs


def ids(html, runs):
    return [r.pk for r in runs if f'id="run-row-{r.pk}"' in html]


def test_fired_alerts_are_marked_and_filterable(client, alice, runs):
    client.force_login(alice)
    html = client.get("/", HTTP_HX_REQUEST="true").content.decode()
    assert ids(html, runs) == [r.pk for r in runs]
    assert f'href="/runs/{runs[0].pk}/#run-alerts" title="2 alerts fired' in html
    assert f'href="/runs/{runs[2].pk}/#run-alerts"' not in html
    only = lambda q: ids(client.get("/", {"q": q}, HTTP_HX_REQUEST="true").content.decode(), runs)  # noqa: E731
    assert only("alert = nonfinite") == [runs[0].pk]
    assert only('alert ~ ""') == [runs[0].pk, runs[1].pk]
    assert only("alert in (clip_ceiling, entropy_floor)") == [runs[0].pk, runs[1].pk]  # each run once
    assert only("alert != clip_ceiling") == [runs[0].pk, runs[2].pk]
