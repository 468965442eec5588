"""The default rule for a runaway A<0 tail: it fires on the trainer's metric batches, posted
through the ingestion endpoint as the trainer pushes them, at the update that makes the third
within 200 updates where one A<0 token with a huge ratio carries most of the update; one such
update alone, or a large ratio with the update spread over many tokens, does not fire. The run's
own rule may move the bound; a bound under 1 is refused."""

from pathlib import Path

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
    assert push(client, run.pk, token, batch((3, HEALTHY), (4, RUNAWAY))).status_code == 202
    assert push(client, run.pk, token, batch((5, HEALTHY), (6, RUNAWAY))).status_code == 202
    assert not Alert.objects.filter(run=run).exists()  # two alone: a healthy run has those
    assert push(client, run.pk, token, batch((7, RUNAWAY))).status_code == 202  # the third, counted over batches
    alert = Alert.objects.get(run=run)
    assert (alert.kind, alert.step, alert.value) == ("neg_adv_tail", 7, 2870.0)
    assert alert.message == (
        "actor/ratio_neg_max = 2870 at update 7 while one token carries 99.7% of Σ r|A|; 3 such updates since "
        "update 4: a runaway A<0 tail (over 50 and 50%); algorithm.dual_clip_c bounds it"
    )
    assert rules.DEFAULTS["neg_adv_tail"].describe() == (
        "a token with A<0 and ratio above 50 carries 50% or more of the update, on 3 updates within 200"
    )


def test_a_batch_that_split_the_update_judges_the_ratio_alone(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    ratio_only = {"actor/ratio_neg_max": 300.0}
    assert push(client, run.pk, token, batch((7, ratio_only), (8, ratio_only), (9, ratio_only))).status_code == 202
    assert Alert.objects.get(run=run).message.startswith(
        "actor/ratio_neg_max = 300 at update 9; 3 such updates since update 7: a runaway A<0 tail (over 50)"
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
    from trainer.algo.diagnostics import update_diagnostics

    weights, logp_of, behav, adv, mask, tail = _tail_minibatch()
    log_r = logp_of(weights).detach() - behav
    fresh = log_r.clone()
    fresh[tail] = 0.0
    runaway, healthy = update_diagnostics(log_r, adv, mask), update_diagnostics(fresh, adv, mask)
    run, token = make_run(alice, tiny_config)
    assert push(client, run.pk, token, batch((1, healthy), (2, healthy))).status_code == 202
    assert not Alert.objects.filter(run=run).exists()
    assert push(client, run.pk, token, batch((3, runaway), (4, runaway), (5, runaway))).status_code == 202
    alert = Alert.objects.get(run=run)
    assert (alert.kind, alert.step, alert.value) == ("neg_adv_tail", 5, pytest.approx(1000.0))


def _demo_series():
    """The CPU demo's own diagnostics (examples/demo-tiny.yaml, `python -m trainer run`, CPU): one
    row per logged update, from tests/fixtures/demo_tail_metrics.csv."""
    path = Path(__file__).resolve().parents[2] / "fixtures" / "demo_tail_metrics.csv"
    rows = [line.split(",") for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return [(int(step), float(ratio), float(share)) for step, ratio, share in rows[1:]]


def test_the_demo_config_does_not_fire_its_own_alarm_and_a_runaway_after_it_does(client, alice, tiny_config):
    demo = _demo_series()
    # what fired it before: single updates as large as the collapses' (r 166 carrying 92%)
    assert max((r, s) for _, r, s in demo if s >= 0.9) > (150.0, 0.9)
    run, token = make_run(alice, tiny_config)
    for i in range(0, len(demo), 25):  # the trainer pushes every few updates
        chunk = [(step, {"actor/ratio_neg_max": r, "actor/top_token_share_max": s}) for step, r, s in demo[i : i + 25]]
        assert push(client, run.pk, token, batch(*chunk)).status_code == 202
    assert not Alert.objects.filter(run=run).exists()
    last = demo[-1][0]
    for step in (last + 202, last + 204, last + 206):  # later the tail runs away: it fires
        assert push(client, run.pk, token, batch((step, RUNAWAY))).status_code == 202
    assert Alert.objects.get(run=run).step == last + 206


def test_the_run_page_says_what_the_alert_means_and_what_to_try(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    assert push(client, run.pk, token, batch((1, RUNAWAY), (2, RUNAWAY), (3, RUNAWAY))).status_code == 202
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    explained = page[page.index('data-explains="neg_adv_tail"') :]
    assert "What it means:" in explained and "algorithm.dual_clip_c: 3" in explained
    assert f"/experiments/new/?clone={run.pk}" in explained
