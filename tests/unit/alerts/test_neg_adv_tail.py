"""The default rule for a runaway A<0 tail: it fires on the trainer's metric batch,
posted through the ingestion endpoint as the trainer pushes it, at the update where one A<0 token
with a huge ratio carries most of the update; a large ratio alone, with the update spread over
many tokens, does not fire. The run's own rule may move the bound; a bound under 1 is refused."""

import pytest

from orchestrator.alerts import rules
from orchestrator.alerts.models import Alert
from orchestrator.alerts.services import RuleError, alert_rule_set, effective_rules
from tests.unit.metrics.helpers import T0, make_run, push

pytestmark = pytest.mark.django_db

# the collapsing minibatch: r = 2,870 on an A<0 token carrying 99.7% of sum r|A|
HEALTHY = {
    "actor/ratio_neg_max": 3.1,
    "actor/ratio_neg_p99": 1.4,
    "actor/ratio_neg_p50": 1.0,
    "actor/top_token_share_max": 0.04,
    "actor/clip_frac": 0.01,
    "train/reward_mean": 0.5,
}
SPREAD = {**HEALTHY, "actor/ratio_neg_max": 45.0, "actor/top_token_share_max": 0.2}  # large, but one of many
RUNAWAY = {**HEALTHY, "actor/ratio_neg_max": 2870.0, "actor/ratio_neg_p99": 2.2, "actor/top_token_share_max": 0.997}


def batch(*steps):
    return {
        "attempt": 1,
        "points": [
            {"step": step, "key": k, "value": v, "time": T0 + step} for step, values in steps for k, v in values.items()
        ],
    }


def test_a_runaway_a_negative_tail_fires_and_a_spread_large_ratio_does_not(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    assert push(client, run.pk, token, batch((1, HEALTHY), (2, SPREAD))).status_code == 202
    assert not Alert.objects.filter(run=run).exists()
    assert push(client, run.pk, token, batch((3, HEALTHY), (4, RUNAWAY), (5, RUNAWAY))).status_code == 202
    alert = Alert.objects.get(run=run)
    assert (alert.kind, alert.step, alert.value) == ("neg_adv_tail", 4, 2870.0)
    assert alert.message == (
        "actor/ratio_neg_max = 2870 at update 4 while one token carries 99.7% of Σ r|A|: "
        "a runaway A<0 tail (over 20 and 50%); algorithm.dual_clip_c bounds it"
    )
    assert (
        "a token with A<0 and ratio above 20 carries 50% or more of the update"
        in rules.DEFAULTS["neg_adv_tail"].describe()
    )


def test_a_batch_that_split_the_update_judges_the_ratio_alone(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    ratio_only = {"actor/ratio_neg_max": 300.0}
    assert push(client, run.pk, token, batch((7, ratio_only))).status_code == 202
    assert Alert.objects.get(run=run).message.startswith(
        "actor/ratio_neg_max = 300 at update 7: a runaway A<0 tail (over 20)"
    )


def test_the_runs_own_rule_moves_the_bound(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    alert_rule_set(kind="neg_adv_tail", run=run, threshold=5000.0)
    assert effective_rules(run)["neg_adv_tail"].threshold == 5000.0
    assert push(client, run.pk, token, batch((4, RUNAWAY))).status_code == 202
    assert not Alert.objects.filter(run=run).exists()
    with pytest.raises(RuleError, match="an importance ratio above 1"):
        alert_rule_set(kind="neg_adv_tail", run=run, threshold=0.5)


def test_the_crafted_tail_minibatchs_own_diagnostics_fire_it_and_the_healthy_ones_do_not(client, alice, tiny_config):
    """The trainer's diagnostics of the crafted minibatch (tests/unit/trainer/test_diagnostics.py:
    one A<0 token with r = 1000 that sets the gradient's direction) fire the default rule; the same
    minibatch with that token on-policy does not."""
    from tests.unit.trainer.test_diagnostics import _tail_minibatch
    from trainer.diagnostics import update_diagnostics

    weights, logp_of, behav, adv, mask, tail = _tail_minibatch()
    log_r = logp_of(weights).detach() - behav
    fresh = log_r.clone()
    fresh[tail] = 0.0
    runaway, healthy = update_diagnostics(log_r, adv, mask), update_diagnostics(fresh, adv, mask)
    run, token = make_run(alice, tiny_config)
    assert push(client, run.pk, token, batch((1, healthy), (2, healthy))).status_code == 202
    assert not Alert.objects.filter(run=run).exists()
    assert push(client, run.pk, token, batch((3, runaway))).status_code == 202
    alert = Alert.objects.get(run=run)
    assert (alert.kind, alert.step, alert.value) == ("neg_adv_tail", 3, pytest.approx(1000.0))
