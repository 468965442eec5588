"""The sweep at a glance's data: the sweep's real axes (a field only a warm-up run
changes is none), each run's chosen summary, the defaults, and the errors naming the field."""

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from orchestrator.metrics.summaries import run_summaries
from orchestrator.metrics.sweep_glance import heatmap_fields, sweep_axes
from tests.unit.metrics.helpers import points

pytestmark = pytest.mark.django_db


@pytest.fixture
def sweep(alice, tiny_config):
    experiment = experiment_create(
        owner=alice,
        name="g",
        project="lab",
        config=tiny_config,
        seeds=2,
        sweep={"staleness.k": [0, 4], "rollout.temperature": [0.8, 1.0]},
    )
    for i, run in enumerate(experiment.runs.order_by("id")):
        metrics_ingest(run=run, attempt=1, points=points("train/reward_mean", range(10), lambda s, i=i: i + s / 10))
    return experiment


def test_axes_are_the_fields_a_grid_varies_not_the_seed_nor_a_lone_warm_up(sweep, alice, tiny_config):
    runs = list(sweep.runs.order_by("id"))
    assert sweep_axes(runs) == ["rollout.temperature", "staleness.k"]  # train.seed varies too: not an axis
    tiny_config["checkpoint"].update(every=1, keep=9)
    warmup = experiment_create(owner=alice, name="w", project="lab", config=tiny_config).runs.get()
    assert sweep_axes([warmup, *runs]) == ["rollout.temperature", "staleness.k"]
    fields = ["checkpoint.every", "checkpoint.keep", "rollout.temperature", "staleness.k", "train.seed"]
    assert heatmap_fields([warmup, *runs], fields) == ("rollout.temperature", "staleness.k")
    single = runs[:1] + [r for r in runs if r.config["staleness"]["k"] == 4 and r.seed == runs[0].seed][:1]
    assert sweep_axes(single) == ["staleness.k"]  # no value shared by two runs: every varying field


def test_the_api_answers_each_runs_summary_and_names_bad_parameters(client, alice, charlie, sweep):
    client.force_login(alice)
    body = client.get(f"/api/v1/metrics/glance?experiment={sweep.pk}").json()
    assert (body["key"], body["stat"], body["axes"]) == (
        "train/reward_mean",
        "tail_mean",
        ["rollout.temperature", "staleness.k"],
    )
    tails = run_summaries([r["id"] for r in body["runs"]], ["train/reward_mean"])
    assert len(body["runs"]) == 8
    assert all(r["value"] == pytest.approx(tails[r["id"]]["train/reward_mean"]["tail_mean"]) for r in body["runs"])
    first = sweep.runs.order_by("id").first()
    row = next(r for r in body["runs"] if r["id"] == first.pk)
    assert row["axes"] == {
        "rollout.temperature": first.config["rollout"]["temperature"],
        "staleness.k": first.config["staleness"]["k"],
    }
    maxes = client.get(f"/api/v1/metrics/glance?experiment={sweep.pk}&stat=max").json()
    assert {r["id"]: r["value"] for r in maxes["runs"]} == {
        r["id"]: tails[r["id"]]["train/reward_mean"]["max"] for r in body["runs"]
    }
    bad = client.get(f"/api/v1/metrics/glance?experiment={sweep.pk}&stat=median")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "stat"
    bad = client.get(f"/api/v1/metrics/glance?experiment={sweep.pk}&key=train/nope")
    assert bad.status_code == 400 and "none of these runs logged 'train/nope'" in bad.json()["errors"][0]["message"]
    client.force_login(charlie)
    assert client.get(f"/api/v1/metrics/glance?experiment={sweep.pk}").status_code == 404
