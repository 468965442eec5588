"""Downsampled series: budgets, spikes and markers kept, rollups equal to reading the points."""

import random

import pytest
from django.db import connection  # noqa: F401 (skipif expressions)

from orchestrator.metrics import selectors
from orchestrator.metrics.chunks import live_points
from orchestrator.metrics.downsample import bucketize, points_from_aggregates
from orchestrator.metrics.services import metrics_ingest

from .helpers import T0, make_run, points

pytestmark = pytest.mark.django_db
KEY = "actor/grad_norm"


def ingest(run, rows, batch=5000):
    for i in range(0, len(rows), batch):
        metrics_ingest(run=run, attempt=run.attempt, points=rows[i : i + batch])


def noisy(n, seed, *, special_every=997):
    rng = random.Random(seed)
    rows = []
    for s in range(n):
        value = "NaN" if s % special_every == 13 else ("Infinity" if s % 4999 == 7 else rng.gauss(0, 1))
        rows.append({"step": s, "key": KEY, "value": value, "time": T0 + s})
    return rows


def test_small_series_come_back_whole(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    ingest(run, points(KEY, range(100)))
    assert selectors.series([run.pk], KEY, max_points=100)[run.pk] == [(s, s / 10, 0) for s in range(100)]


def test_long_series_fit_the_budget_and_keep_spikes_markers_and_the_last_point(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    rows = noisy(40_000, seed=1)
    rows[12_345]["value"] = 1e6  # a spike a mean or a stride would lose
    ingest(run, rows)
    out = selectors.series([run.pk], KEY, max_points=500)[run.pk]
    specials = [p for p in out if p[2]]
    assert len(out) - len(specials) <= 500
    assert (12_345, 1e6, 0) in out
    assert out[-1][0] == 39_999
    assert {p[2] for p in specials} == {1, 2}
    assert [p[0] for p in out] == sorted({p[0] for p in out})


def test_a_zoomed_range_is_served_at_full_resolution(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    ingest(run, noisy(40_000, seed=2))
    out = selectors.series([run.pk], KEY, start=1000, end=1999, max_points=1500)[run.pk]
    assert [p[0] for p in out] == list(range(1000, 2000))


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="rollups exist on PostgreSQL only")
@pytest.mark.parametrize(
    "seed,n,budget,start,end",
    [
        (3, 120_000, 1500, None, None),
        (4, 40_000, 100, None, None),
        (5, 30_000, 300, 7_000, 21_000),
    ],
)
def test_rollups_give_the_same_chart_as_the_points(alice, tiny_config, seed, n, budget, start, end):
    run, _ = make_run(alice, tiny_config)
    ingest(run, noisy(n, seed))
    window = selectors.plan_window(start or 0, end if end is not None else n - 1, budget, rollups=True)
    assert window.level > 0
    from_rollups = selectors._from_rollups([run.pk], KEY, window, budget, "value")[run.pk]
    pts = live_points(
        [run.pk],
        [KEY],
        lo=window.lo // window.level * window.level,
        hi=(window.hi // window.level + 1) * window.level - 1,
    )[(run.pk, KEY)]
    from_points = points_from_aggregates(bucketize(pts.steps, pts.values, pts.specials, pts.times, window.width))
    assert from_rollups == from_points


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="rollups exist on PostgreSQL only")
def test_rollups_follow_a_restart(alice, tiny_config):
    from .helpers import start_attempt

    run, _ = make_run(alice, tiny_config)
    ingest(run, points(KEY, range(20_000)))
    run, _ = start_attempt(run, 2)
    ingest(run, points(KEY, range(10_000, 12_000), value=lambda s: -1.0))
    out = selectors.series([run.pk], KEY, max_points=200)[run.pk]
    assert out[-1][0] == 11_999
    assert max(p[0] for p in out) == 11_999
    assert min(p[1] for p in out) == -1.0
    from orchestrator.metrics.models import MetricRollup

    # the buckets of the superseded steps past the restarted attempt's last point are gone
    assert not MetricRollup.objects.filter(run_id=run.pk, last_step__gt=11_999).exists()


def test_wall_time_mapping_is_monotone(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    ingest(run, points(KEY, range(30_000)))
    out = selectors.series([run.pk], KEY, max_points=300, field="time")[run.pk]
    assert len(out) <= 300 and all(t == T0 + s for s, t, _ in out)


def test_compare_shares_one_grid_and_leaves_runs_without_the_key_empty(alice, tiny_config):
    run_a, _ = make_run(alice, tiny_config, name="a")
    run_b, _ = make_run(alice, tiny_config, name="b")
    run_c, _ = make_run(alice, tiny_config, name="c")
    ingest(run_a, points(KEY, range(10_000)))
    ingest(run_b, points(KEY, range(0, 20_000, 2)))
    out = selectors.series([run_a.pk, run_b.pk, run_c.pk], KEY, max_points=400)
    assert out[run_c.pk] == []
    assert out[run_a.pk][-1][0] == 9_999 and out[run_b.pk][-1][0] == 19_998
    assert len(out[run_a.pk]) <= 400 and len(out[run_b.pk]) <= 400


def test_series_api_checks_parameters_and_access(client, alice, charlie, tiny_config):
    run, _ = make_run(alice, tiny_config)
    client.force_login(alice)
    url = f"/api/v1/runs/{run.pk}/metrics"
    for query, field in [
        ({"key": KEY, "max_points": "x"}, "max_points"),
        ({"key": KEY, "max_points": 1}, "max_points"),
        ({}, "key"),
        ({"key": KEY, "start": 9, "end": 3}, "end"),
        ({"key": KEY, "field": "y"}, "field"),
    ]:
        answer = client.get(url, query)
        assert answer.status_code == 400 and answer.json()["errors"][0]["field"] == field
    client.force_login(charlie)
    assert client.get(url, {"key": KEY}).status_code == 404
    assert client.get("/api/v1/metrics/compare", {"runs": str(run.pk), "key": KEY}).status_code == 404


def test_compare_api_returns_each_run_in_order(client, alice, tiny_config):
    run_a, _ = make_run(alice, tiny_config, name="a")
    run_b, _ = make_run(alice, tiny_config, name="b")
    ingest(run_a, points(KEY, range(5)))
    client.force_login(alice)
    answer = client.get("/api/v1/metrics/compare", {"runs": f"{run_b.pk},{run_a.pk}", "key": KEY}).json()
    assert [r["run"] for r in answer["runs"]] == [run_b.pk, run_a.pk]
    assert answer["runs"][1]["points"] == [[s, s / 10] for s in range(5)]
    assert answer["runs"][1]["attempts"] == [[1, 0]]


@pytest.mark.parametrize("span", [100_000, 200_000, 1_000_000, 10_000_000, 123_456_789])
def test_the_window_reads_whole_rollup_buckets_and_stays_near_the_budget(span):
    from orchestrator.metrics.downsample import bucket_width

    window = selectors.plan_window(0, span - 1, 1500, rollups=True)
    assert window.level and window.width % window.level == 0
    assert bucket_width(0, span - 1, 1500) <= window.width <= 1.5 * bucket_width(0, span - 1, 1500)
    assert window.width // window.level <= 64  # rows read per drawn bucket stay bounded


@pytest.mark.parametrize("span", [1_000, 40_000, 60_000])
def test_a_window_too_short_for_the_rollups_reads_the_points_at_the_full_budget(span):
    from orchestrator.metrics.downsample import bucket_width

    window = selectors.plan_window(0, span - 1, 1500, rollups=True)
    assert window.level == 0 and window.width == bucket_width(0, span - 1, 1500)


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="rollups exist on PostgreSQL only")
def test_incremental_rollups_equal_a_rebuild_from_the_points(alice, tiny_config):
    """Batches of several keys with gaps, specials, re-posts and uneven sizes: the rollups kept
    up to date batch by batch match a rebuild from the points."""
    from orchestrator.metrics import store
    from orchestrator.metrics.models import MetricRollup

    run, _ = make_run(alice, tiny_config)
    rng = random.Random(7)
    step, previous = 0, []
    for _ in range(40):
        rows = []
        for _ in range(rng.randint(1, 90)):
            step += rng.choice([1, 1, 1, 3, 17])
            for key in rng.sample(["a/x", "a/y", "b/z"], rng.randint(1, 3)):
                value = (
                    rng.choice(["NaN", "Infinity", "-Infinity"]) if rng.random() < 0.03 else round(rng.gauss(0, 1), 1)
                )  # ties
                rows.append({"step": step, "key": key, "value": value, "time": T0 + step})
        if previous and rng.random() < 0.25:  # a spool replay re-posts part of the previous batch
            rows = [dict(r, value=1.5) for r in previous[-rng.randint(1, len(previous)) :]] + rows
        metrics_ingest(run=run, attempt=1, points=rows)
        previous = rows

    def snapshot():  # every bucket, its partial rows merged (store.py)
        return store.merged_rollups(run.pk)

    incremental = snapshot()
    assert MetricRollup.objects.filter(run=run).count() > len(incremental)  # partial buckets, merged above
    store.rebuild_rollups(run.pk)
    assert MetricRollup.objects.filter(run=run).count() == len(incremental)
    assert incremental == snapshot()
