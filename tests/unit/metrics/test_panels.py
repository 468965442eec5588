"""The default panels tell the off-policy story: eval per benchmark once, tau on the M2 panel,
the token fraction named by objective; "best" follows the metric-key table's direction."""

import pytest

from orchestrator.metrics import selectors
from orchestrator.metrics.panels import eval_keys, fraction_label, panels_for, thresholds
from orchestrator.metrics.services import metrics_ingest
from trainer.metric_keys import METRIC_KEYS, direction, parse_directions

from .helpers import make_run, points


def by_id(panels):
    return {p["id"]: p for p in panels}


def test_one_eval_set_is_drawn_once_and_the_average_only_over_several():
    assert eval_keys(["eval/avg_acc", "eval/arithmetic/acc"]) == ["eval/arithmetic/acc"]
    assert eval_keys(["eval/avg_acc", "eval/gsm8k/acc", "eval/math500/acc"]) == [
        "eval/avg_acc",
        "eval/gsm8k/acc",
        "eval/math500/acc",
    ]
    assert eval_keys(["train/reward_mean"]) == ["eval/avg_acc"]  # an empty panel says "no data yet"


def test_the_m2_panel_is_logarithmic_with_the_runs_tau():
    m2 = by_id(panels_for(["actor/m2"], [{"algorithm": {"objective": "m2po", "tau_m2": 0.04}}]))["m2"]
    assert m2["log_y"] is True
    assert m2["lines"] == [{"y": 0.04, "label": "τ = 0.04"}]
    assert m2["description"]
    mixed = [
        {"algorithm": {"objective": "m2po", "tau_m2": 0.02}},
        {"algorithm": {"objective": "grpo", "tau_m2": 0.04}},
        {"algorithm": {"objective": "m2po", "tau_m2": 0.08}},
    ]
    assert [line["y"] for line in thresholds(mixed)] == [0.02, 0.08]  # grpo has no tau to draw


def test_the_token_fraction_is_named_by_what_the_objective_does():
    assert fraction_label("m2po") == "masked (m2po)"
    assert fraction_label("grpo") == "clipped (grpo)"
    single = by_id(panels_for([], [{"algorithm": {"objective": "m2po"}}]))["clip_frac"]
    assert single["title"] == "Token fraction masked (m2po)"
    assert single["labels"] == {"actor/clip_frac": "masked fraction"}
    both = by_id(panels_for([], [{"algorithm": {"objective": "grpo"}}, {"algorithm": {"objective": "m2po"}}]))[
        "clip_frac"
    ]
    assert both["title"] == "Token fraction clipped (grpo) / masked (m2po)" and both["labels"] == {}


def test_every_panel_says_what_to_look_for():
    assert all(p["description"] for p in panels_for([]))


def test_every_known_direction_is_max_min_or_none_and_custom_keys_are_settable():
    assert direction("eval/gsm8k/acc") == "max" and direction("actor/m2") == "min"
    assert direction("train/tokens_seen") is None and direction("actor/lr") is None
    assert {direction(k) for k in METRIC_KEYS} <= {"max", "min", None}
    custom = parse_directions("custom/score=max, custom/*_loss=min")
    assert direction("custom/score", custom) == "max" and direction("custom/kl_loss", custom) == "min"
    assert direction("custom/other", custom) is None
    assert direction("actor/m2", {"actor/m2": "max"}) == "max"  # a lab may re-declare a known key
    with pytest.raises(ValueError, match="custom/x=best"):
        parse_directions("custom/x=best")


@pytest.mark.django_db
def test_best_follows_the_declared_direction_not_the_name(alice, tiny_config, settings):
    run, _ = make_run(alice, tiny_config)
    rising = lambda s: s / 10  # noqa: E731
    rows = (
        points("actor/tr_frac", range(5), rising)
        + points("train/tokens_seen", range(5), rising)
        + points("custom/score_loss", range(5), rising)
        + points("actor/ppo_kl", range(5), rising)
    )
    metrics_ingest(run=run, attempt=1, points=rows)
    summary = selectors.summaries([run.pk])[run.pk]
    assert summary["actor/tr_frac"]["best"] == 0.4  # more tokens in the trust region is better
    assert summary["actor/ppo_kl"]["best"] == 0.0
    assert summary["train/tokens_seen"]["best"] is None  # a counter has no best
    assert summary["custom/score_loss"]["best"] is None  # unknown, and the name is not a guess
    settings.OPL_METRIC_DIRECTIONS = "custom/*_loss=max"
    assert selectors.summaries([run.pk])[run.pk]["custom/score_loss"]["best"] == 0.4


def test_the_two_drifts_have_their_own_panels_once_a_run_logs_them():
    from trainer.loss_keys import ENGINE_DRIFT_KEYS, POLICY_DRIFT_KEYS

    def drift_ids(keys):
        return [p["id"] for p in panels_for(keys, [{}]) if p["id"].startswith("drift_")]

    assert drift_ids(["train/reward_mean"]) == []
    panels = {p["id"]: p for p in panels_for(list(ENGINE_DRIFT_KEYS + POLICY_DRIFT_KEYS), [{}])}
    assert [i for i in panels if i.startswith("drift_")] == ["drift_engine", "drift_policy", "drift_ess"]
    assert all(k.startswith("drift/engine_") for k in panels["drift_engine"]["keys"])
    assert all(k.startswith("drift/policy_") for k in panels["drift_policy"]["keys"])


def test_where_the_time_went_is_shown_with_named_lines_once_a_run_logs_it():
    assert "time_went" not in [p["id"] for p in panels_for(["train/reward_mean"], [{}])]
    panels = {p["id"]: p for p in panels_for(["perf/train_s", "perf/trainer_idle_s", "perf/gen_idle_ratio"], [{}])}
    assert {"time_went", "idle_ratio"} <= set(panels)
    time_went = panels["time_went"]
    assert time_went["group"] == "Where the time went"
    assert time_went["labels"]["perf/wait_s"] == "wait for a batch"
    assert time_went["labels"]["perf/wait_weights_s"] == "wait for weights"
    assert all(k in METRIC_KEYS for p in panels.values() for k in p["keys"])


def test_observed_staleness_is_drawn_beside_the_configured_bound():
    config = {"staleness": {"mode": "async", "max_staleness": 3}}
    keys = ["rollout/observed_staleness_max", "rollout/staleness_bound"]
    keys += ["rollout/observed_staleness/0", "rollout/observed_staleness/2"]
    panels = {p["id"]: p for p in panels_for(keys, [config])}
    assert panels["staleness_observed"]["lines"] == [{"y": 3, "label": "bound = 3"}]
    assert panels["staleness_hist"]["keys"] == ["rollout/observed_staleness/0", "rollout/observed_staleness/2"]
    quiet = {p["id"] for p in panels_for(["train/reward_mean"], [{"staleness": {"mode": "stale_k", "k": 1}}])}
    assert not {"staleness_observed", "staleness_hist"} & quiet
