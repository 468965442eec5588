"""Migrations 0006/0007 on stored data: chunk sums, counts and spans filled, summaries rebuilt."""

import numpy as np
import pytest

from orchestrator.metrics.models import MetricSeries
from orchestrator.metrics.summaries import run_summaries
from tests.migrations import latest, migrate

from .helpers import make_run

BEFORE = ("metrics", "0005_points_in_chunks")
KEY = "train/reward_mean"


@pytest.mark.django_db(transaction=True)
def test_stored_chunks_get_their_sums_and_runs_their_summaries(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    old = migrate([BEFORE])
    Chunk = old.get_model("metrics", "MetricChunk")
    for seq, lo in enumerate(range(0, 100, 25), 1):  # steps 0..99, value = step, step 97 NaN
        steps = np.arange(lo, lo + 25, dtype="<i8")
        values = steps.astype("<f8")
        specials = (steps == 97).astype("i1")
        values[specials == 1] = np.nan
        Chunk.objects.create(
            run_id=run.pk,
            key=KEY,
            attempt=1,
            seq=seq,
            superseded=False,
            first_step=lo,
            last_step=lo + 24,
            n=25,
            steps=steps.tobytes(),
            values=values.tobytes(),
            specials=specials.tobytes(),
            times=(1.7e9 + steps).astype("<f8").tobytes(),
        )
    migrate(latest())
    got = run_summaries([run.pk])[run.pk][KEY]
    assert (got["count"], got["min"], got["max"], got["last"], got["last_step"]) == (100, 0.0, 99.0, 99.0, 99)
    assert got["tail_mean"] == pytest.approx(np.mean([s for s in range(90, 100) if s != 97]))
    assert MetricSeries.objects.get(run=run, key=KEY).max_span == 24
