"""The alert check rides on the ingestion pipeline's round trips: a trainer's appending batch with
watched keys costs the database round trips of one without them (libpq's protocol trace, as
benchmarks/metrics.py counts them), also once a rule has fired; a rule changed between batches
applies to the next one; the reward fold stays exactly once when writers and retries of one run
race, and when a batch takes the general path (a re-post with new steps)."""

import os
import tempfile
import threading
from pathlib import Path

import pytest
from django.db import connection, connections

from orchestrator.alerts import rules
from orchestrator.alerts.models import Alert, RunWatch
from orchestrator.alerts.services import alert_rule_set
from orchestrator.metrics import pipeline
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import T0, make_run

# One training step of a tiny CPU m2po run (its metrics.jsonl): 37 keys, 5 of them watched.
STEP_KEYS = [
    "actor/clip_frac",
    "actor/clip_frac_high",
    "actor/clip_frac_low",
    "actor/entropy",
    "actor/grad_norm",
    "actor/lr",
    "actor/m2",
    "actor/m2_after",
    "actor/m2_all",
    "actor/m2po_tau",
    "actor/pg_loss",
    "actor/ppo_kl",
    "actor/ratio_max",
    "actor/ratio_mean",
    "actor/ratio_min",
    "actor/tr_frac",
    "perf/gen_s",
    "perf/samples_per_s",
    "perf/step_s",
    "perf/tokens_per_s",
    "perf/train_s",
    "reward/errors",
    "reward/timeouts",
    "rollout/engine_kl",
    "rollout/queue_batches",
    "rollout/reward_mean",
    "rollout/staleness_max",
    "rollout/staleness_mean",
    "rollout/staleness_min",
    "train/adv_abs_mean",
    "train/response_len_mean",
    "train/reward_mean",
    "train/reward_std",
    "train/samples_seen",
    "train/solved_frac",
    "train/tokens_seen",
    "train/train_step",
]


def calm(key, step):
    """A value no default rule fires on."""
    return 0.05 if key == "actor/clip_frac" else 0.5


def trainer_batch(steps, rename=lambda k: k, value=calm):
    return [{"step": s, "key": rename(k), "value": value(k, s), "time": T0 + s} for s in steps for k in STEP_KEYS]


def round_trips(fn) -> int:
    """fn()'s database round trips on this thread's connection: each time libpq turns from sending to reading."""
    from psycopg.pq import Trace

    connection.ensure_connection()
    pg = connection.connection.pgconn
    fd, path = tempfile.mkstemp()
    pg.trace(fd)
    pg.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
    try:
        fn()
    finally:
        pg.untrace()
        os.close(fd)
    trips, prev = 0, None
    for line in Path(path).read_text().splitlines():
        trips += line[:1] == "B" and prev == "F"
        prev = line[:1] or prev
    os.unlink(path)
    return trips


@pytest.mark.django_db
def test_a_trainer_batch_with_watched_keys_costs_the_round_trips_of_one_without(alice, tiny_config):
    watched, _ = make_run(alice, tiny_config, name="watched")
    plain, _ = make_run(alice, tiny_config, name="plain")
    alert_rule_set(project=watched.experiment.project, kind="entropy_floor", threshold=0.001)
    for run in (watched, plain):
        metrics_ingest(run=run, attempt=1, points=trainer_batch([2, 4]))
    assert RunWatch.objects.get(run=watched).reward_points == 2

    unwatched = round_trips(
        lambda: metrics_ingest(run=plain, attempt=1, points=trainer_batch([6, 8], rename=lambda k: f"other/{k}"))
    )
    assert round_trips(lambda: metrics_ingest(run=watched, attempt=1, points=trainer_batch([6, 8]))) == unwatched
    watch = RunWatch.objects.get(run=watched)
    assert (watch.reward_points, watch.reward_step) == (4, 8)  # folded in by the same round trips

    nan = lambda key, step: "NaN" if key == "actor/grad_norm" else calm(key, step)  # noqa: E731
    metrics_ingest(run=watched, attempt=1, points=trainer_batch([10], value=nan))
    assert list(Alert.objects.filter(run=watched).values_list("kind", flat=True)) == ["nonfinite"]
    # a rule that fired already in this attempt costs nothing more on later batches
    again = round_trips(lambda: metrics_ingest(run=watched, attempt=1, points=trainer_batch([12], value=nan)))
    assert again == unwatched
    assert Alert.objects.filter(run=watched).count() == 1


@pytest.mark.django_db
def test_a_rule_changed_between_batches_applies_to_the_next_batch(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    clip = lambda key, step: 0.15 if key == "actor/clip_frac" else calm(key, step)  # noqa: E731
    metrics_ingest(run=run, attempt=1, points=trainer_batch([2], value=clip))
    assert not Alert.objects.filter(run=run).exists()  # under the default ceiling 0.2
    alert_rule_set(project=run.experiment.project, kind="clip_ceiling", threshold=0.1, action="stop")
    metrics_ingest(run=run, attempt=1, points=trainer_batch([4], value=clip))
    alert = Alert.objects.get(run=run)
    assert (alert.kind, alert.step, alert.action) == ("clip_ceiling", 4, "stop")
    run.refresh_from_db()
    assert run.cancel_requested


@pytest.mark.django_db
def test_a_re_post_with_new_reward_steps_takes_the_general_path_and_folds_only_the_new_ones(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    reward = lambda s: {"step": s, "key": "train/reward_mean", "value": s / 10, "time": T0 + s}  # noqa: E731
    metrics_ingest(run=run, attempt=1, points=[reward(s) for s in range(1, 7)])
    metrics_ingest(run=run, attempt=1, points=[reward(s) for s in range(4, 10)])  # steps 4-6 stored already
    expected = rules.RewardTrack()
    rules.check_reward_drop(expected, 1.0, {"train/reward_mean": [(s, s / 10) for s in range(1, 10)]})
    watch = RunWatch.objects.get(run=run)
    assert (watch.reward_points, watch.reward_step) == (9, 9)
    assert watch.reward_ema == pytest.approx(expected.ema) and watch.reward_best == pytest.approx(expected.best)


@pytest.mark.django_db(transaction=True)
def test_racing_writers_and_retries_of_one_run_fold_each_reward_step_once(alice, tiny_config):
    """Four pushers post the same run's batches in step order, each a retry racing the others:
    every batch is stored once and every reward step folded once, in step order; one alert."""
    run, _ = make_run(alice, tiny_config)

    def value(key, step):
        return (
            "NaN"
            if key == "actor/pg_loss" and step == 30
            else 0.5 + step % 7 / 100
            if key == "train/reward_mean"
            else calm(key, step)
        )

    batches = [trainer_batch(range(lo, lo + 10, 2), value=value) for lo in range(2, 82, 10)]  # steps 2..80
    errors = []

    def pusher():
        try:
            for body in batches:
                while True:
                    try:
                        metrics_ingest(run=run, attempt=1, points=body)
                        break
                    except pipeline.Busy:  # the pusher's 429: try again
                        continue
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=pusher) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    expected = rules.RewardTrack()
    rules.check_reward_drop(expected, 1.0, {"train/reward_mean": [(s, 0.5 + s % 7 / 100) for s in range(2, 82, 2)]})
    watch = RunWatch.objects.get(run=run)
    assert (watch.reward_points, watch.reward_step) == (40, 80)
    assert watch.reward_ema == pytest.approx(expected.ema) and watch.reward_best == pytest.approx(expected.best)
    assert list(Alert.objects.filter(run=run).values_list("kind", "step")) == [("nonfinite", 30)]
