"""`study_verdicts` on crafted tables of runs, each test named before its data: the verdicts a
statistician gives, through the command a lab runs on a CSV."""

import json
from io import StringIO
from types import SimpleNamespace

import pytest
from django.core.management import CommandError, call_command

from orchestrator.studies.document import verdict_rows
from orchestrator.studies.judge import judge
from orchestrator.studies.run_table import read_runs_csv
from tests.unit.studies.run_tables import SEED_OFFSETS, as_csv, in_regime

LEVEL_079 = {"tail": lambda i: 0.79 + SEED_OFFSETS[i]}  # 0.01 below on-policy, seed by seed


def verdicts(tmp_path, rows, *args) -> dict:
    path = tmp_path / "runs.csv"
    path.write_text(as_csv(rows))
    out = StringIO()
    call_command("study_verdicts", str(path), "--json", *args, stdout=out)
    return json.loads(out.getvalue())["claims"]


def test_a_clear_gap_of_0_05_with_tight_intervals_reproduces_a(tmp_path):
    a = verdicts(tmp_path, in_regime())["a"]
    assert a["verdict"] == "reproduced", a["reason"]
    diff = a["measured"]["difference"]
    assert diff["paired"] and diff["mean"] == pytest.approx(0.05) and diff["low"] > 0.025
    checks = {c["name"]: c["passed"] for c in a["regime"]}
    assert checks == {"budget": None, "seeds": True, "run_length": True, "movement": True, "m2": True}


def test_a_gap_below_the_margin_is_not_reproduced_and_one_across_it_is_inconclusive(tmp_path):
    assert verdicts(tmp_path, in_regime(grpo256=LEVEL_079))["a"]["verdict"] == "not reproduced"
    noisy = in_regime(grpo256={"tail": lambda i: 0.77 + (-0.06, 0.05, -0.04, 0.06, -0.01)[i]})
    assert verdicts(tmp_path, noisy)["a"]["verdict"] == "inconclusive"


def test_m2po_0_20_below_with_wide_intervals_does_not_reproduce_b(tmp_path):
    wide = in_regime(m2po256={"tail": lambda i: 0.6 + (-0.15, -0.08, 0.0, 0.08, 0.15)[i], "seed": lambda i: i + 11})
    b = verdicts(tmp_path, wide)["b"]
    assert b["verdict"] == "not reproduced", b["reason"]
    diff = b["measured"]["difference"]
    assert not diff["paired"] and diff["mean"] == pytest.approx(-0.2) and diff["high"] - diff["low"] > 0.15


def test_equivalence_with_a_passing_no_clip_control_says_the_mask_is_not_shown(tmp_path):
    b = verdicts(tmp_path, in_regime())["b"]
    assert b["verdict"] == "reproduced" and b["measured"]["control"]["equivalent"] is True
    assert "the mask is not what the study shows" in b["reason"]
    collapsing = in_regime(no_clip256={"tail": 0.55})
    b = verdicts(tmp_path, collapsing)["b"]
    assert b["verdict"] == "reproduced" and b["measured"]["control"]["equivalent"] is False
    assert "the mask is not what the study shows" not in b["reason"]


def test_a_result_that_reproduces_at_7_tau_is_outside_the_regime(tmp_path):
    high_m2 = in_regime(m2po256={"m2_median_over_tau": 7.0})
    claims = verdicts(tmp_path, high_m2)
    for claim in "abc":
        assert claims[claim]["verdict"] == "outside the paper's regime", claims[claim]["reason"]
        assert claims[claim]["measured"]["measured_status"] == "reproduced"
    assert "7x tau" in claims["c"]["reason"]


def test_a_failed_check_marks_a_not_reproduced_claim_outside_too(tmp_path):
    claims = verdicts(tmp_path, in_regime(grpo256=LEVEL_079, grpo0={"reward_movement": 0.01}))
    assert claims["a"]["verdict"] == "outside the paper's regime"
    assert claims["a"]["measured"]["measured_status"] == "not reproduced"


def test_a_run_shorter_than_ten_times_its_staleness_is_outside_the_regime(tmp_path):
    short = in_regime(**{f"{o}256": {"updates_after_ramp": 1500} for o in ("grpo", "m2po", "no_clip")})
    claims = verdicts(tmp_path, short)
    assert claims["a"]["verdict"] == "outside the paper's regime"
    assert "lasts 1756 updates" in claims["a"]["reason"]


def test_a_short_no_clip_run_leaves_d_inconclusive(tmp_path):
    d = verdicts(tmp_path, in_regime(no_clip256={"updates_after_ramp": 500, "collapsed": 1}))["d"]
    assert d["verdict"] == "inconclusive"
    assert d["reason"].startswith("the run is shorter than the collapse horizon: 500 updates after the ramp")


def test_d_past_the_horizon_is_a_majority_of_collapses(tmp_path):
    assert verdicts(tmp_path, in_regime(no_clip256={"collapsed": 1, "tail": 0.3}))["d"]["verdict"] == "reproduced"
    assert verdicts(tmp_path, in_regime())["d"]["verdict"] == "not reproduced"


def test_c_compares_the_fractions_after_the_ramp(tmp_path):
    c = verdicts(tmp_path, in_regime())["c"]
    assert c["verdict"] == "reproduced" and c["measured"]["ratio"] == pytest.approx(0.05)
    c = verdicts(tmp_path, in_regime(m2po256={"masked_fraction": 0.006}))["c"]
    assert c["verdict"] == "not reproduced" and c["measured"]["ratio"] == pytest.approx(0.5)


def test_the_warm_up_spread_is_reported_beside_the_seed_spread(tmp_path):
    rows = in_regime()
    for row in rows:  # seeds 1-2 from one warm-up, 3-5 from another that ends 0.04 higher
        row["warmup"] = "w1" if row["seed"] <= 2 else "w2"
        row["tail"] += 0.0 if row["seed"] <= 2 else 0.04
    spread = verdicts(tmp_path, rows)["a"]["measured"]["spread"]["grpo@0"]
    assert spread["warmups"] == 2 and spread["between_warmup_sd"] > spread["within_warmup_seed_sd"]


def test_several_learning_rates_are_judged_each_on_its_own(tmp_path):
    rows = in_regime() + [{**row, "lr": 2e-6} for row in in_regime(grpo256=LEVEL_079)]
    path = tmp_path / "runs.csv"
    path.write_text(as_csv(rows))
    out = StringIO()
    call_command("study_verdicts", str(path), "--json", stdout=out)
    body = json.loads(out.getvalue())
    assert body["arms"]["lr=1e-06"]["claims"]["a"]["verdict"] == "reproduced"
    assert body["arms"]["lr=2e-06"]["claims"]["a"]["verdict"] == "not reproduced"


def test_a_bad_table_names_the_row_and_the_column(tmp_path):
    rows = in_regime()
    rows[3]["tail"] = "high"
    path = tmp_path / "runs.csv"
    path.write_text(as_csv(rows))
    with pytest.raises(CommandError, match=r"row 5, column 'tail': 'high' is not a number"):
        call_command("study_verdicts", str(path), "--json")
    path.write_text("objective,staleness\ngrpo,0\n")
    with pytest.raises(CommandError, match="header: missing column"):
        call_command("study_verdicts", str(path))
    with pytest.raises(CommandError, match="--margin-a: must be a positive number"):
        call_command("study_verdicts", str(path), "--margin-a", "-1")


def test_stale_runs_past_the_budget_another_lr_measured_are_outside_the_regime(tmp_path):
    """Two learning rates: at 4e-6 the stale clip runs collapse (S·η 1.0e-3), at 1e-6 none does
    (2.6e-4): the fitted boundary lies between, so the 4e-6 arm is past the budget."""
    low = in_regime()
    high = [{**row, "lr": 4e-6} for row in in_regime(grpo256={"collapsed": 1}, m2po256={"collapsed": 1})]
    path = tmp_path / "runs.csv"
    path.write_text(as_csv(low + high))
    out = StringIO()
    call_command("study_verdicts", str(path), "--json", stdout=out)
    body = json.loads(out.getvalue())
    assert body["budget"]["boundary"] == pytest.approx((256e-6 * 1024e-6) ** 0.5)
    past = body["arms"]["lr=4e-06"]["claims"]["a"]
    assert past["verdict"] == "outside the paper's regime" and "past the budget the sweep measured" in past["reason"]
    within = body["arms"]["lr=1e-06"]["claims"]["a"]
    assert within["verdict"] == "reproduced"
    assert next(c for c in within["regime"] if c["name"] == "budget")["passed"] is True


def test_a_table_from_another_trainer_reads_ppo_and_true_false(tmp_path):
    rows = in_regime()
    for row in rows:
        row["objective"] = "ppo" if row["objective"] == "grpo" else row["objective"]
        row["collapsed"] = "false"
    assert verdicts(tmp_path, rows)["a"]["verdict"] == "reproduced"


def test_the_document_gives_the_warm_up_spread_beside_the_seed_spread_as_the_page_does(tmp_path):
    rows = in_regime()
    for row in rows:  # seeds 1-2 from one warm-up, 3-5 from another that ends 0.04 higher
        row["warmup"] = "w1" if row["seed"] <= 2 else "w2"
        row["tail"] += 0.0 if row["seed"] <= 2 else 0.04
    path = tmp_path / "runs.csv"
    path.write_text(as_csv(rows))
    verdicts = judge(read_runs_csv(path.read_text()))
    a, b, c, _ = verdict_rows(SimpleNamespace(verdicts=verdicts))[2:]
    assert "grpo@0: SD between 2 warm-ups 0.0" in a and ", seeds within a warm-up 0.0" in a
    assert "m2po@256: SD between 2 warm-ups" in b
    assert "warm-ups" not in c  # (c) compares fractions, not tails
