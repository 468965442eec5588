"""Several writers to one run: batches behind a key's head merge like appends (same chunks'
points, summaries and rollups as one writer in step order), and concurrent writers lose nothing."""

import threading

import numpy as np
import pytest
from django.db import connection, connections

from orchestrator.metrics import store
from orchestrator.metrics.chunks import live_series
from orchestrator.metrics.models import MetricChunk, MetricRollup, MetricSeries
from orchestrator.metrics.selectors import series
from orchestrator.metrics.services import metrics_ingest
from orchestrator.metrics.summaries import run_summaries

from .helpers import make_run, points

KEYS = ["train/reward_mean", "actor/m2", "eval/avg_acc"]


def value(s):
    return "NaN" if s % 97 == 13 else float((s * 7919) % 1009) / 10


def rows_for(steps):
    return [p for key in KEYS for p in points(key, steps, value=value)]


def state(run):
    """Everything derived storage holds about a run, arrival order aside."""
    rollups = [r[:11] + r[12:] for r in store.merged_rollups(run.pk)] if connection.vendor == "postgresql" else []
    summaries = sorted(
        MetricSeries.objects.filter(run_id=run.pk).values_list(
            "key", "first_step", "last_step", "last_value", "last_special", "min_value", "max_value", "count"
        )
    )
    pts = {
        k: (p.steps.tolist(), np.nan_to_num(p.values, nan=-1).tolist(), p.specials.tolist())
        for k, p in live_series(run.pk).items()
    }
    return rollups, summaries, pts


@pytest.mark.django_db
@pytest.mark.parametrize("layout", ["own ranges", "interleaved steps"])
def test_out_of_order_writers_store_what_one_writer_in_order_stores(alice, tiny_config, layout):
    n, writers = 9000, 8  # spans several buckets of every rollup level
    steps = np.arange(n)
    if layout == "own ranges":  # each writer its own contiguous range, 100 steps a batch, round robin
        per_writer = np.array_split(steps, writers)
        batches = [
            list(w[i : i + 100]) for i in range(0, n // writers + 100, 100) for w in per_writer if len(w[i : i + 100])
        ]
    else:  # writer w sends steps w, w+8, w+16, ... 20 at a time
        per_writer = [steps[w::writers] for w in range(writers)]
        batches = [list(w[i : i + 20]) for i in range(0, n, 20) for w in per_writer if len(w[i : i + 20])]
    ordered, _ = make_run(alice, tiny_config, name="ordered")
    for lo in range(0, n, 500):
        metrics_ingest(run=ordered, attempt=1, points=rows_for(range(lo, min(n, lo + 500))))
    scrambled, _ = make_run(alice, tiny_config, name="scrambled")
    for b in batches:
        metrics_ingest(run=scrambled, attempt=1, points=rows_for([int(s) for s in b]))
    assert state(scrambled) == state(ordered)
    got, want = run_summaries([scrambled.pk])[scrambled.pk], run_summaries([ordered.pk])[ordered.pk]
    for key in KEYS:  # the tail mean adds chunk sums in another order: equal up to rounding
        assert got[key].pop("tail_mean") == pytest.approx(want[key].pop("tail_mean"), rel=1e-12)
    assert got == want
    for key in KEYS:
        assert (
            series([scrambled.pk], key, max_points=300)[scrambled.pk]
            == series([ordered.pk], key, max_points=300)[ordered.pk]
        )
    if connection.vendor == "postgresql":
        assert MetricRollup.objects.filter(run_id=scrambled.pk).exists()


@pytest.mark.django_db
def test_a_retried_batch_behind_the_head_changes_nothing(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    for lo in range(0, 300, 50):
        metrics_ingest(run=run, attempt=1, points=rows_for(range(lo, lo + 50)))
    before = state(run)
    metrics_ingest(run=run, attempt=1, points=rows_for(range(100, 150)))  # a retry of batch 3
    assert state(run) == before


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    "connection.vendor != 'postgresql'",
    reason="SQLite's test database is in memory, where concurrent writers fail ('table is locked') instead of waiting",
)
def test_concurrent_writers_to_one_run_lose_nothing_and_number_batches_without_gaps(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    writers, per_writer = 6, 8
    errors = []

    def write(w):
        try:
            for b in range(per_writer):
                lo = (w * per_writer + b) * 10
                metrics_ingest(run=run, attempt=1, points=rows_for(range(lo, lo + 10)))
                # the same steps again from another "process" (a retry racing the original)
                metrics_ingest(run=run, attempt=1, points=rows_for(range(lo, lo + 5)))
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    total = writers * per_writer * 10
    for key in KEYS:
        pts = live_series(run.pk, [key])[key]
        assert pts.steps.tolist() == list(range(total))  # each step live once
    seqs = sorted(set(MetricChunk.objects.filter(run=run).values_list("seq", flat=True)))
    assert seqs == list(range(1, 2 * writers * per_writer + 1))
    assert {s["count"] for s in run_summaries([run.pk])[run.pk].values()} == {total}
