"""The study pages speak one staleness unit and open on one metric: the heatmap, the seed
statistics and the verdicts give staleness in optimizer updates as run names do (k = 8 at 2
updates per step is s16, not 8), and the statistics, the sweep at a glance and the compare page's
heatmap default to the same key, so one cell shows one number everywhere."""

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.compare_charts import compare_data
from orchestrator.metrics.services import metrics_ingest
from orchestrator.metrics.sweep_glance import sweep_glance
from orchestrator.studies.report import study_report
from tests.unit.metrics.helpers import points

pytestmark = pytest.mark.django_db


@pytest.fixture
def sweep(alice, tiny_config):
    tiny_config["algorithm"]["updates_per_step"] = 2
    experiment = experiment_create(
        owner=alice,
        name="units",
        config=tiny_config,
        sweep={"staleness.k": [0, 8], "algorithm.objective": ["grpo", "m2po"]},
    )
    for i, run in enumerate(experiment.runs.order_by("id")):
        for key in ("train/reward_mean", "rollout/reward_mean"):
            metrics_ingest(run=run, attempt=1, points=points(key, range(2, 42, 2), lambda s, i=i: i + s / 100))
    experiment.runs.update(state="succeeded")
    return experiment


def test_staleness_is_in_updates_on_the_study_pages_as_in_run_names(sweep):
    names = sorted(sweep.runs.values_list("name", flat=True))
    assert names == ["grpo-s0", "grpo-s16", "m2po-s0", "m2po-s16"]
    report = study_report(sweep, {})
    assert report.grid["row_path"] == "staleness.s"
    assert [row["value"] for row in report.grid["rows"]] == [0, 16]
    assert sorted(c.label for c in report.table.cells.values()) == [
        "algorithm.objective=grpo, staleness.s=0",
        "algorithm.objective=grpo, staleness.s=16",
        "algorithm.objective=m2po, staleness.s=0",
        "algorithm.objective=m2po, staleness.s=16",
    ]
    verdicts = {v.claim: v for v in report.verdicts}
    assert verdicts["d"].reason == "the study has no stale no_clip runs"
    assert verdicts["a"].numbers["high"] == 16  # in updates, as the run names say, not k = 8
    assert not any("staleness.k" in v.reason for v in report.verdicts)


def test_the_study_pages_default_to_one_metric(sweep):
    runs = list(sweep.runs.order_by("id"))
    page, _ = compare_data(runs, experiment=sweep)
    assert study_report(sweep, {}).table.metric == "rollout/reward_mean"
    assert sweep_glance(runs)["key"] == "rollout/reward_mean"
    assert page["study_metric"] == "rollout/reward_mean"
    assert all("rollout/reward_mean" in page["summary"][r.pk] for r in runs)
