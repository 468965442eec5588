"""Compaction merges the small chunks a step-by-step trainer leaves, and no reader can tell."""

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import Max

from orchestrator.metrics import live, selectors, store
from orchestrator.metrics.chunks import live_rows
from orchestrator.metrics.models import MetricChunk
from orchestrator.metrics.services import metrics_ingest

from .helpers import make_run, points, start_attempt

pytestmark = pytest.mark.django_db
KEYS = ("train/reward_mean", "actor/m2")


def post_each_step(run, steps, value=lambda s: s / 10):
    for step in steps:
        rows = [*points(KEYS[0], [step], value), *points(KEYS[1], [step], lambda s: -value(s))]
        if step % 50 == 7:
            rows[0]["value"] = "NaN"
        metrics_ingest(run=run, attempt=run.attempt, points=rows)


def what_readers_see(run, *, replay_last=20):
    return {
        "points": {key: live_rows(run.pk, key) for key in KEYS},
        "summaries": selectors.summaries([run.pk]),
        "charts": {key: selectors.series([run.pk], key, max_points=100) for key in KEYS},
        "rollups": [r[:5] + r[6:7] + r[8:9] + r[12:13] for r in store.merged_rollups(run.pk)]
        if connection.vendor == "postgresql"
        else [],
        "replay": live.events_after(run.pk, store.last_seq(run.pk) - replay_last, None) if replay_last else None,
    }


def test_small_chunks_merge_while_recent_batches_and_every_reading_stay_the_same(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    post_each_step(run, range(300))
    before = what_readers_see(run)

    removed = store.compact_chunks(run.pk, keep_batches=20, target=64)

    assert removed == 2 * 280 - 2 * 5  # 280 one-point chunks per key become 5 of at most 64 points
    chunks = list(MetricChunk.objects.filter(run=run).values_list("seq", "n"))
    assert all(n <= 64 for _, n in chunks)
    assert sorted(seq for seq, n in chunks if seq > 280) == sorted(list(range(281, 301)) * 2)  # left for replay
    assert what_readers_see(run) == before

    # storage still behaves: a re-posted step inside a merged chunk replaces only that step
    metrics_ingest(run=run, attempt=1, points=points(KEYS[1], [5], value=lambda s: 99.0))
    assert live_rows(run.pk, KEYS[1])[5] == (5, 99.0, 0)
    assert live_rows(run.pk, KEYS[1])[4:7:2] == before["points"][KEYS[1]][4:7:2]


def test_attempts_are_never_merged_together_and_superseded_points_stay_apart(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    post_each_step(run, range(40))
    run, _ = start_attempt(run, 2)
    post_each_step(run, range(30, 60), value=lambda s: 100 + s)
    before = what_readers_see(run, replay_last=0)  # keep_batches=0 below: no replay window is kept
    superseded = sorted(MetricChunk.objects.filter(run=run, superseded=True).values_list("pk", flat=True))

    store.compact_chunks(run.pk, keep_batches=0)

    live = MetricChunk.objects.filter(run=run, superseded=False)
    assert sorted(live.values_list("key", "attempt", "first_step", "last_step", "n")) == [
        (KEYS[1], 1, 0, 29, 30),
        (KEYS[1], 2, 30, 59, 30),
        (KEYS[0], 1, 0, 29, 30),
        (KEYS[0], 2, 30, 59, 30),
    ]
    assert sorted(MetricChunk.objects.filter(run=run, superseded=True).values_list("pk", flat=True)) == superseded
    assert what_readers_see(run, replay_last=0) == before
    assert live.aggregate(seq=Max("seq"))["seq"] == store.last_seq(run.pk)


def test_the_command_compacts_recent_or_named_runs_and_names_unknown_ones(alice, tiny_config, capsys):
    run, _ = make_run(alice, tiny_config)
    post_each_step(run, range(live.MAX_REPLAY_BATCHES + 10))
    call_command("compact_metrics")  # recent runs, as beat does: this one is running
    assert "18 chunk(s) merged away" in capsys.readouterr().out  # 10 old batches x 2 keys -> 1 chunk per key
    call_command("compact_metrics", run=[run.pk])
    assert "0 chunk(s) merged away" in capsys.readouterr().out
    with pytest.raises(CommandError, match="no run with id \\[987654\\]"):
        call_command("compact_metrics", run=[987654])
