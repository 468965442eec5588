"""Metric columns of the runs table: chosen keys, a chosen summary (last, tail mean,
min, max) from the run summaries, and sorting by one, runs without the key last."""

import re

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import points

pytestmark = pytest.mark.django_db
KEY = "eval/avg_acc"


@pytest.fixture
def three_runs(alice, tiny_config):
    runs = list(
        experiment_create(owner=alice, name="cols", config=tiny_config, sweep={"train.steps": [1, 2, 3]}).runs.order_by(
            "id"
        )
    )
    # run 0 ends high (0.7) after a low stretch, run 1 is steady, run 2 never evaluates
    metrics_ingest(run=runs[0], attempt=1, points=points(KEY, range(20), lambda s: 0.7 if s == 19 else 0.1))
    metrics_ingest(run=runs[1], attempt=1, points=points(KEY, range(20), lambda s: 0.5))
    return runs


def row_order(html):
    return [int(i) for i in re.findall(r'id="run-row-(\d+)"', html)]


def test_chosen_columns_show_the_chosen_summary(client, alice, three_runs):
    client.force_login(alice)
    html = client.get("/", {"cols": KEY, "stat": "max"}).content.decode()
    assert '>eval/<wbr>avg_acc</a><small class="stat">max</small></th>' in html
    assert "train/<wbr>reward_mean</a>" not in html  # the default columns are replaced
    assert '<td class="num">0.7</td>' in html and '<td class="num">0.5</td>' in html


def test_sorting_by_a_metric_puts_runs_without_it_last(client, alice, three_runs):
    client.force_login(alice)
    runs = three_runs
    last = row_order(client.get("/", {"cols": KEY, "sort": f"-metric:{KEY}"}).content.decode())
    assert last == [runs[0].pk, runs[1].pk, runs[2].pk]  # last values 0.7, 0.5, none
    tail = row_order(client.get("/", {"cols": KEY, "stat": "tail_mean", "sort": f"-metric:{KEY}"}).content.decode())
    assert tail == [runs[1].pk, runs[0].pk, runs[2].pk]  # tail means (steps 18-19) 0.5, (0.1 + 0.7) / 2
    ascending = row_order(client.get("/", {"cols": KEY, "sort": f"metric:{KEY}"}).content.decode())
    assert ascending == [runs[1].pk, runs[0].pk, runs[2].pk]


def test_a_bad_column_is_named_and_the_defaults_stand_in(client, alice, three_runs):
    client.force_login(alice)
    html = client.get("/", {"cols": "not\ta key!", "stat": "median"}).content.decode()
    assert "cols: not a metric key: &#x27;not\\ta key!&#x27;" in html
    assert "stat: one of last, tail_mean, min, max" in html
    assert "train/<wbr>reward_mean</a>" in html and len(row_order(html)) == 3
