"""Run summaries (summaries.run_summaries): last, min, max, count and the tail mean, checked
against the same numbers computed with numpy from the live points."""

import math

import numpy as np
import pytest

from orchestrator.metrics.chunks import live_series
from orchestrator.metrics.services import metrics_ingest
from orchestrator.metrics.store import compact_chunks
from orchestrator.metrics.summaries import run_summaries, tail_start

from .helpers import make_run, points, start_attempt

pytestmark = pytest.mark.django_db
KEY = "train/reward_mean"


def expected(run, key):
    """The summary computed from every live point."""
    pts = live_series(run.pk, [key])[key]
    finite = pts.specials == 0
    tail = (pts.steps >= tail_start(int(pts.steps[0]), int(pts.steps[-1]))) & finite
    return {
        "last": float(pts.values[-1]) if pts.specials[-1] == 0 else math.nan,
        "min": float(pts.values[finite].min()),
        "max": float(pts.values[finite].max()),
        "tail_mean": float(pts.values[tail].mean()) if tail.any() else None,
        "count": len(pts),
        "last_step": int(pts.steps[-1]),
    }


def close(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        (x is None and y is None) or (isinstance(x, float) and math.isnan(x) and math.isnan(y)) or x == pytest.approx(y)
        for x, y in ((a[k], b[k]) for k in a)
    )


def test_summary_of_appending_batches_matches_the_points(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    for lo in range(0, 200, 20):  # the tail [180, 199] starts on a chunk boundary
        metrics_ingest(run=run, attempt=1, points=points(KEY, range(lo, lo + 20), value=lambda s: math.sin(s)))
    got = run_summaries([run.pk])[run.pk][KEY]
    assert got["count"] == 200 and got["last_step"] == 199
    assert close(got, expected(run, KEY))
    assert got["tail_mean"] == pytest.approx(np.mean([math.sin(s) for s in range(180, 200)]))


def test_tail_that_starts_inside_a_chunk_counts_only_its_steps(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    metrics_ingest(run=run, attempt=1, points=points(KEY, range(101), value=lambda s: float(s)))
    got = run_summaries([run.pk], [KEY])[run.pk][KEY]
    assert got["tail_mean"] == pytest.approx(np.mean(range(90, 101)))  # steps 90..100 of one chunk


def test_batches_behind_the_head_give_the_summary_of_the_points(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    rng = np.random.default_rng(3)
    blocks = [list(range(lo, lo + 25)) for lo in range(0, 500, 25)]
    for i in rng.permutation(len(blocks)):  # writers' blocks in any order
        metrics_ingest(run=run, attempt=1, points=points(KEY, blocks[i], value=lambda s: float((s * 37) % 101)))
    got = run_summaries([run.pk])[run.pk][KEY]
    assert got["count"] == 500 and close(got, expected(run, KEY))


def test_a_repost_that_changes_the_extreme_recomputes_it(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    metrics_ingest(run=run, attempt=1, points=points(KEY, range(10), value=lambda s: float(s)))
    metrics_ingest(run=run, attempt=1, points=points(KEY, [9], value=lambda s: -5.0))  # the max and last change
    got = run_summaries([run.pk])[run.pk][KEY]
    assert (got["min"], got["max"], got["last"], got["count"]) == (-5.0, 8.0, -5.0, 10)
    assert close(got, expected(run, KEY))


def test_non_finite_values_stay_out_of_min_max_and_tail(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    metrics_ingest(run=run, attempt=1, points=points(KEY, range(10), value=lambda s: 1.0 if s < 8 else "NaN"))
    got = run_summaries([run.pk])[run.pk][KEY]
    assert math.isnan(got["last"]) and (got["min"], got["max"], got["count"]) == (1.0, 1.0, 10)
    assert got["tail_mean"] is None  # the tail (step 9) holds only NaN


def test_restart_and_compaction_keep_the_summary_of_the_live_points(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    for lo in range(0, 60, 3):
        metrics_ingest(run=run, attempt=1, points=points(KEY, range(lo, lo + 3)))
    run, _ = start_attempt(run, 2)
    metrics_ingest(run=run, attempt=2, points=points(KEY, range(40, 50), value=lambda s: 100.0 + s))
    assert compact_chunks(run.pk, keep_batches=0) > 0
    got = run_summaries([run.pk])[run.pk][KEY]
    assert got["count"] == 50 and got["last_step"] == 49 and got["max"] == 149.0
    assert close(got, expected(run, KEY))


def test_only_the_asked_keys_and_runs_with_points(alice, tiny_config):
    run_a, _ = make_run(alice, tiny_config, name="a")
    run_b, _ = make_run(alice, tiny_config, name="b")
    metrics_ingest(run=run_a, attempt=1, points=points(KEY, [1]) + points("eval/avg_acc", [1]))
    got = run_summaries([run_a.pk, run_b.pk], [KEY, "actor/m2"])
    assert list(got) == [run_a.pk] and list(got[run_a.pk]) == [KEY]
    assert got[run_a.pk][KEY] == {"last": 0.1, "min": 0.1, "max": 0.1, "tail_mean": 0.1, "count": 1, "last_step": 1}


def test_the_cached_tail_mean_follows_new_and_changed_points(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    metrics_ingest(run=run, attempt=1, points=points(KEY, range(11), value=lambda s: 1.0))
    assert run_summaries([run.pk])[run.pk][KEY]["tail_mean"] == 1.0  # computed and cached
    metrics_ingest(run=run, attempt=1, points=points(KEY, range(11, 21), value=lambda s: 3.0))
    assert run_summaries([run.pk])[run.pk][KEY]["tail_mean"] == 3.0  # tail [18, 20]: new points
    metrics_ingest(run=run, attempt=1, points=points(KEY, [20], value=lambda s: 6.0))  # same count, new value
    assert run_summaries([run.pk])[run.pk][KEY]["tail_mean"] == 4.0
    metrics_ingest(run=run, attempt=1, points=points(KEY, [20], value=lambda s: 6.0))  # a retry: no change
    assert run_summaries([run.pk])[run.pk][KEY] == {
        "last": 6.0,
        "min": 1.0,
        "max": 6.0,
        "tail_mean": 4.0,
        "count": 21,
        "last_step": 20,
    }


@pytest.mark.parametrize("last_step", [95, 100, 137, 1001])
def test_a_studys_tail_mean_is_the_run_pages(alice, tiny_config, last_step):
    """One tail: studies.statistics.summarize gives the run summary's tail_mean on the same points,
    for spans that are and are not multiples of 10."""
    from orchestrator.studies.statistics import summarize

    run, _ = make_run(alice, tiny_config)
    steps = list(range(3, last_step + 1, 2))
    metrics_ingest(run=run, attempt=1, points=points(KEY, steps, lambda s: math.sin(s / 7.0)))
    page = run_summaries([run.pk], [KEY])[run.pk][KEY]["tail_mean"]
    assert summarize(steps, [math.sin(s / 7.0) for s in steps]) == pytest.approx(page, rel=1e-12)
