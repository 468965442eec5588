"""The default rule that an async run's observed staleness stays within its configured bound: it
fires on the trainer's metric batch, posted through the ingestion endpoint, at the first update
whose observed staleness is over the bound logged beside it; within the bound it stays quiet."""

import pytest

from orchestrator.alerts import rules
from orchestrator.alerts.models import Alert
from orchestrator.alerts.services import RuleError, alert_rule_set
from tests.unit.metrics.helpers import T0, make_run, push

pytestmark = pytest.mark.django_db


def point(observed: float, bound: float = 2.0) -> dict[str, float]:
    return {
        "rollout/observed_staleness_max": observed,
        "rollout/staleness_bound": bound,
        f"rollout/observed_staleness/{int(observed)}": 1.0,
        "train/reward_mean": 0.5,
    }


def batch(*steps):
    return {
        "attempt": 1,
        "points": [
            {"step": step, "key": k, "value": v, "time": T0 + step} for step, values in steps for k, v in values.items()
        ],
    }


def test_staleness_over_the_bound_fires_once_and_within_it_does_not(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    assert push(client, run.pk, token, batch((2, point(0)), (4, point(2)))).status_code == 202
    assert not Alert.objects.filter(run=run).exists()
    assert push(client, run.pk, token, batch((6, point(1)), (8, point(5)), (10, point(6)))).status_code == 202
    alert = Alert.objects.get(run=run)
    assert (alert.kind, alert.step, alert.value) == ("staleness_bound", 8, 5.0)
    assert alert.message == (
        "rollout/observed_staleness_max = 5 at update 8, over the configured bound 2: "
        "staleness.max_staleness is not holding"
    )
    assert "exceeds the configured bound by more than 0 updates" in rules.DEFAULTS["staleness_bound"].describe()


def test_a_margin_lets_a_little_over_pass_and_a_negative_margin_is_refused(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    alert_rule_set(kind="staleness_bound", run=run, threshold=3.0)
    assert push(client, run.pk, token, batch((2, point(5)))).status_code == 202
    assert not Alert.objects.filter(run=run).exists()
    assert push(client, run.pk, token, batch((4, point(6)))).status_code == 202
    assert Alert.objects.get(run=run).step == 4
    with pytest.raises(RuleError, match="updates over the bound, 0 or more"):
        alert_rule_set(kind="staleness_bound", run=run, threshold=-1.0)


def test_a_stale_k_run_logs_no_bound_and_is_not_judged(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    stale_k = {"rollout/observed_staleness_max": 8.0, "train/reward_mean": 0.5}
    assert push(client, run.pk, token, batch((2, stale_k))).status_code == 202
    assert not Alert.objects.filter(run=run).exists()
