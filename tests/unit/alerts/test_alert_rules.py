"""Each alert rule fires from crafted metric batches through the real ingestion service
(metrics_ingest) or from the beat task's check, once per attempt and kind; the run's own rules
override the defaults; a cancel rule asks the cluster to stop the run."""

from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.alerts.models import Alert, RunWatch
from orchestrator.alerts.services import alert_rule_set, alerts_check_time
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import T0, make_run, start_attempt
from trainer.cli import NO_CHECKPOINT_MARKER

pytestmark = pytest.mark.django_db


def ingest(run, key, values, first_step=1):
    batch = [{"step": first_step + i, "key": key, "value": v, "time": T0 + i} for i, v in enumerate(values)]
    metrics_ingest(run=run, attempt=run.attempt, points=batch)


def kinds(run):
    return sorted(Alert.objects.filter(run=run).values_list("kind", flat=True))


@pytest.fixture
def run(alice, tiny_config):
    return make_run(alice, tiny_config)[0]


def test_a_nan_gradient_or_an_infinite_loss_fires_once(run):
    ingest(run, "actor/grad_norm", [0.5, 0.7])
    assert kinds(run) == []
    ingest(run, "actor/grad_norm", [0.9, "NaN"], first_step=3)
    alert = Alert.objects.get(run=run)
    assert (alert.kind, alert.step) == ("nonfinite", 4) and "actor/grad_norm is nan" in alert.message
    ingest(run, "actor/pg_loss", ["Infinity"], first_step=5)
    assert kinds(run) == ["nonfinite"]  # once per attempt and kind


def test_a_retried_run_is_watched_anew(run):
    ingest(run, "actor/pg_loss", ["NaN"])
    run, _ = start_attempt(run, 2)  # e.g. Retry after a 'stop' alert
    ingest(run, "actor/pg_loss", ["NaN"], first_step=2)
    assert list(Alert.objects.filter(run=run).order_by("attempt").values_list("attempt", "kind")) == [
        (1, "nonfinite"),
        (2, "nonfinite"),
    ]


def test_the_smoothed_reward_falling_from_its_best_fires(run):
    ingest(run, "train/reward_mean", [0.1, 0.3, 0.5, 0.7, 0.8, 0.8, 0.8])
    ingest(run, "train/reward_mean", [0.75, 0.7, 0.72], first_step=8)  # noise under the drop
    assert kinds(run) == []
    ingest(run, "train/reward_mean", [0.2, 0.1, 0.0, 0.0, 0.0], first_step=11)  # collapse
    alert = Alert.objects.get(run=run)
    assert alert.kind == "reward_drop" and "below its best" in alert.message
    watch = RunWatch.objects.get(run=run)
    assert watch.reward_best - watch.reward_ema >= 0.3 and watch.reward_points == 15


def test_a_re_posted_reward_batch_is_folded_in_once(run):
    ingest(run, "train/reward_mean", [0.8] * 6)
    ingest(run, "train/reward_mean", [0.8] * 6)  # the pusher's retry of a batch whose answer was lost
    watch = RunWatch.objects.get(run=run)
    assert (watch.reward_points, watch.reward_step) == (6, 6)


def test_entropy_under_its_floor_fires(run):
    ingest(run, "actor/entropy", [1.2, 0.4, 0.05])
    assert kinds(run) == []
    ingest(run, "actor/entropy", [0.004], first_step=4)
    assert kinds(run) == ["entropy_floor"]


def test_a_masked_or_clipped_fraction_over_its_ceiling_fires(run):
    ingest(run, "actor/clip_frac", [0.01, 0.15])
    assert kinds(run) == []
    ingest(run, "actor/clip_frac", [0.35], first_step=3)
    assert Alert.objects.get(run=run).message == "actor/clip_frac = 0.35 at update 3, over the ceiling 0.2"


def test_the_runs_own_rule_overrides_the_default_and_can_switch_one_off(run):
    alert_rule_set(run=run, kind="clip_ceiling", threshold=0.5)
    alert_rule_set(run=run, kind="entropy_floor", enabled=False)
    ingest(run, "actor/clip_frac", [0.35])
    ingest(run, "actor/entropy", [0.0])
    assert kinds(run) == []
    ingest(run, "actor/clip_frac", [0.6], first_step=2)
    assert kinds(run) == ["clip_ceiling"]


def test_no_heartbeat_while_running_fires_on_beat(run):
    now = timezone.now()
    run.last_heartbeat = now - timedelta(seconds=200)
    run.save(update_fields=["last_heartbeat"])
    assert alerts_check_time(now=now) == 0  # the default allows 300 s
    assert alerts_check_time(now=now + timedelta(seconds=150)) == 1
    assert "no heartbeat for 350 s" in Alert.objects.get(run=run, kind="no_heartbeat").message


def test_no_progress_while_running_fires_on_beat(run):
    alert_rule_set(run=run, kind="no_heartbeat", enabled=False)
    alert_rule_set(run=run, kind="no_progress", window_s=600)
    now = timezone.now()
    alerts_check_time(now=now)  # sees update 0 for the first time
    ingest(run, "train/reward_mean", [0.1, 0.2])  # the run moves to update 2
    assert alerts_check_time(now=now + timedelta(seconds=500)) == 0
    assert alerts_check_time(now=now + timedelta(seconds=1000)) == 0  # progress at 500 s restarted the clock
    assert alerts_check_time(now=now + timedelta(seconds=1200)) == 1
    assert Alert.objects.get(run=run).message == "still at update 2 after 700 s (limit 600 s)"


def test_a_cancel_rule_cancels_the_run_and_tells_the_trainer_to_skip_its_checkpoint(run, tmp_path):
    run.run_dir = str(tmp_path)
    run.save(update_fields=["run_dir"])
    alert_rule_set(run=run, kind="nonfinite", action="cancel")
    ingest(run, "actor/pg_loss", ["NaN"])
    run.refresh_from_db()
    alert = Alert.objects.get(run=run)
    assert run.cancel_requested and run.state_reason.startswith("cancelling")
    assert (
        alert.action == "cancel" and alert.action_result == "cancel requested: the trainer exits without a checkpoint"
    )
    assert (tmp_path / NO_CHECKPOINT_MARKER).read_text() == "attempt 1\n"


def test_a_stop_rule_cancels_the_run_after_a_checkpoint(run, tmp_path):
    run.run_dir = str(tmp_path)
    run.save(update_fields=["run_dir"])
    alert_rule_set(run=run, kind="clip_ceiling", threshold=0.1, action="stop")
    ingest(run, "actor/clip_frac", [0.5])
    run.refresh_from_db()
    assert run.cancel_requested and Alert.objects.get(run=run).action_result.startswith("stop requested")
    assert not (tmp_path / NO_CHECKPOINT_MARKER).exists()


def test_rules_of_the_runs_project_apply_under_the_runs_own(run):
    project = run.experiment.project
    alert_rule_set(project=project, kind="entropy_floor", threshold=0.5, action="cancel")
    ingest(run, "actor/entropy", [0.4])
    assert Alert.objects.get(run=run).action == "cancel"
