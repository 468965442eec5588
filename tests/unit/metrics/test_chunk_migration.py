"""Migration 0005: points stored one row each before it become chunks, with nothing lost."""

import pytest
from django.db import connection

from orchestrator.metrics import selectors
from orchestrator.metrics.chunks import live_rows
from orchestrator.metrics.models import MetricChunk, MetricRollup, MetricSeries
from tests.migrations import latest, migrate

from .helpers import T0, make_run

BEFORE = ("metrics", "0004_rollup_levels_fanout_4")
KEY = "train/reward_mean"


@pytest.mark.django_db(transaction=True)
def test_points_of_every_batch_attempt_and_kind_move_into_chunks(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    old = migrate([BEFORE])
    Point = old.get_model("metrics", "MetricPoint")

    def point(step, seq, attempt=1, value=None, special=0, superseded=False):
        return Point(
            run_id=run.pk,
            key=KEY,
            step=step,
            seq=seq,
            attempt=attempt,
            superseded=superseded,
            value=step / 10 if value is None and not special else value,
            special=special,
            time=T0 + step,
        )

    Point.objects.bulk_create(
        [point(s, seq=1) for s in range(5)]
        + [point(5, seq=2, special=1)]
        + [point(s, seq=2, superseded=True) for s in range(6, 9)]  # attempt 1, superseded by attempt 2
        + [point(s, seq=3, attempt=2, value=-1.0) for s in range(6, 9)]
    )

    migrate(latest())

    assert live_rows(run.pk, KEY) == [(s, s / 10, 0) for s in range(5)] + [(5, None, 1)] + [
        (s, -1.0, 0) for s in range(6, 9)
    ]
    chunks = sorted(MetricChunk.objects.filter(run=run).values_list("seq", "attempt", "superseded", "first_step", "n"))
    assert chunks == [(1, 1, False, 0, 5), (2, 1, False, 5, 1), (2, 1, True, 6, 3), (3, 2, False, 6, 3)]
    summary = MetricSeries.objects.get(run=run, key=KEY)
    assert (summary.first_step, summary.last_step, summary.min_value, summary.max_value) == (0, 8, -1.0, 0.4)
    assert selectors.series([run.pk], KEY)[run.pk] == live_rows(run.pk, KEY)
    if connection.vendor == "postgresql":
        assert MetricRollup.objects.filter(run_id=run.pk, width=64).get().n == 9
