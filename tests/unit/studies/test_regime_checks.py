"""Regime checks in every verdict: crafted sweeps whose runs log what the trainer logs (M2 before
masking, the near-deterministic fraction, the reward curve), stored through the real ingestion
path, turned into the table of runs the verdicts judge, and the verdicts they give: "outside the
paper's regime" with the measured reason where a check fails, whichever way the numbers point, and
"not reproduced" only where every check passed."""

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from orchestrator.studies import claims
from orchestrator.studies.claims import NOT_REPRODUCED, OUTSIDE_REGIME, REPRODUCED, RegimeCheck, Thresholds, Verdict
from orchestrator.studies.report import study_report
from orchestrator.studies.table import build_table
from orchestrator.studies.verdicts import study_rows, study_verdicts

SHORT_HORIZON = Thresholds(collapse_horizon=100)  # these runs last 400 updates: (d) judged past 100

STEPS = list(range(4, 404, 4))  # 100 points; head: steps <= 43.6, tail: steps >= 364.4


def _ingest(run, key, values):
    metrics_ingest(
        run=run,
        attempt=1,
        points=[{"step": s, "key": key, "value": v, "time": 1.0e9 + s} for s, v in zip(STEPS, values, strict=True)],
    )


def _ramp(start, end):
    return [start + (end - start) * i / (len(STEPS) - 1) for i in range(len(STEPS))]


def _sweep(owner, config, *, rewards, m2, near_det, fractions, seeds=3, neg_ratio=None):
    """rewards[(k, objective)] = (start, end) of a linear curve; m2 and fractions per cell."""
    experiment = experiment_create(
        owner=owner,
        name="crafted",
        config=config,
        seeds=seeds,
        sweep={"staleness.k": [0, 8], "algorithm.objective": ["grpo", "m2po", "no_clip"]},
    )
    for run in experiment.runs.all():
        cell = (run.sweep_values["staleness.k"], run.sweep_values["algorithm.objective"])
        start, end = rewards[cell]
        jitter = 0.01 * (run.seed - config["train"]["seed"])
        _ingest(run, "rollout/reward_mean", [v + jitter for v in _ramp(start, end)])
        _ingest(run, "actor/m2", [m2.get(cell, 0.01)] * len(STEPS))
        _ingest(run, "actor/near_det_frac", [near_det] * len(STEPS))
        _ingest(run, "actor/clip_frac", [fractions.get(cell, 0.01)] * len(STEPS))
        if neg_ratio is not None:
            _ingest(run, "actor/ratio_neg_max", [neg_ratio.get(cell, 1.5) * (1 + run.seed)] * len(STEPS))
    experiment.runs.update(state="succeeded")
    return experiment


IN_REGIME = {
    "rewards": {
        (0, "grpo"): (0.3, 0.9),
        (8, "grpo"): (0.3, 0.5),
        (0, "m2po"): (0.3, 0.9),
        (8, "m2po"): (0.3, 0.88),
        (0, "no_clip"): (0.3, 0.9),
        (8, "no_clip"): (0.3, 0.6),
    },
    "m2": {(8, "m2po"): 0.03, (8, "grpo"): 0.02},  # 0.75x tau = 0.04
    "near_det": 0.8,
    "fractions": {(8, "m2po"): 0.004, (8, "grpo"): 0.02},  # 0.2x: more than the 0.1x the paper shows
}


@pytest.fixture
def crafted(alice, tiny_config, settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    return lambda **kw: _sweep(alice, tiny_config, **{**IN_REGIME, **kw})


def _verdicts(experiment, th=SHORT_HORIZON):
    table = build_table(list(experiment.runs.all()), metric="rollout/reward_mean")
    return {v.claim: v for v in study_verdicts(table, th)}


def test_every_check_passes_and_a_failed_claim_stays_not_reproduced(db, crafted):
    v = _verdicts(crafted())
    assert v["a"].status == REPRODUCED and "paired by warm-up and seed" in v["a"].reason
    assert v["b"].status == REPRODUCED and v["b"].numbers["control"]["equivalent"] is False  # no-clip trails
    c = v["c"]
    assert c.status == NOT_REPRODUCED, c.reason  # in the regime, and M2PO still masks 0.2x: a real failure
    checks = {ch.name: ch.passed for ch in c.checks}
    assert checks == {"budget": None, "seeds": True, "run_length": True, "m2": True, "near_det": True}
    m2 = next(ch for ch in c.checks if ch.name == "m2")
    assert m2.value == pytest.approx(0.75) and "0.75x tau" in m2.text
    assert v["d"].status == NOT_REPRODUCED  # a linear rise never falls: stagnation, with headroom left
    assert [ch.name for ch in v["d"].checks] == ["seeds", "run_length", "headroom"]
    assert all(ch.passed for ch in v["d"].checks)
    movement = next(ch for ch in v["a"].checks if ch.name == "movement")
    # on-policy: tail minus first 10%, each the mean of 10 of the 100 points (indices 90..99 and 0..9)
    assert movement.value == pytest.approx(0.6 * 90 / 99)


def test_m2_far_above_tau_puts_the_mask_claim_outside_the_regime(db, crafted):
    v = _verdicts(crafted(m2={(8, "m2po"): 1.6}, fractions={(8, "m2po"): 0.07, (8, "grpo"): 0.1}))
    c = v["c"]
    assert c.status == OUTSIDE_REGIME and c.numbers["measured_status"] == NOT_REPRODUCED
    assert c.reason.startswith(
        "median M2 before masking after the ramp (m2po at staleness 16) is 40x tau, above the paper's regime"
    )
    assert "As measured: not reproduced, after the ramp M2PO 7.000% masked" in c.reason
    # symmetric: a claim that holds outside the regime says no more about the paper than one that fails
    assert v["b"].status == OUTSIDE_REGIME and v["b"].numbers["measured_status"] == REPRODUCED


def test_few_near_deterministic_tokens_put_the_mask_claim_outside_the_regime(db, crafted):
    c = _verdicts(crafted(near_det=0.1))["c"]
    assert c.status == OUTSIDE_REGIME and c.reason.startswith("10% of tokens near-deterministic")


def test_a_flat_on_policy_run_makes_a_match_vacuous(db, crafted):
    flat = {(0, "grpo"): (0.5, 0.52), (8, "grpo"): (0.5, 0.5), (8, "m2po"): (0.5, 0.51)}
    v = _verdicts(crafted(rewards={**IN_REGIME["rewards"], **flat}))
    assert v["b"].numbers["measured_status"] == REPRODUCED  # equivalent ...
    assert v["b"].status == OUTSIDE_REGIME  # ... but nothing moved, so nothing was tested
    assert "on-policy's reward moves +0.0182" in v["b"].reason  # 0.02 x 90/99
    assert v["a"].status == OUTSIDE_REGIME and v["a"].numbers["measured_status"] == NOT_REPRODUCED


def test_a_no_clip_run_at_the_ceiling_cannot_collapse(db, crafted):
    saturated = {(8, "no_clip"): (0.3, 0.995)}
    d = _verdicts(crafted(rewards={**IN_REGIME["rewards"], **saturated}))["d"]
    assert d.status == OUTSIDE_REGIME and "it saturates" in d.reason


def test_unmeasured_quantities_block_nothing(db, alice, tiny_config, settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    experiment = experiment_create(
        owner=alice,
        name="old",
        config=tiny_config,
        seeds=2,
        sweep={"staleness.k": [0, 8], "algorithm.objective": ["grpo", "m2po"]},
    )
    for run in experiment.runs.all():  # a sweep from before the trainer logged M2 or near_det_frac
        _ingest(run, "rollout/reward_mean", _ramp(0.2, 0.8 if run.sweep_values["staleness.k"] == 0 else 0.4))
        _ingest(
            run, "actor/clip_frac", [0.001 if run.sweep_values["algorithm.objective"] == "m2po" else 0.05] * len(STEPS)
        )
    experiment.runs.update(state="succeeded")
    c = _verdicts(experiment)["c"]
    assert c.status == REPRODUCED
    checks = {ch.name: ch.passed for ch in c.checks}
    assert checks == {"budget": None, "seeds": True, "run_length": True, "m2": None, "near_det": None}


def test_one_seed_stays_inconclusive_whatever_the_checks(db, crafted):
    v = _verdicts(crafted(seeds=1, m2={(8, "m2po"): 5.0}))
    assert v["a"].status == claims.INCONCLUSIVE and "too few runs" in v["a"].reason
    assert v["c"].status == claims.INCONCLUSIVE and v["c"].reason.startswith("1 runs in the fewest cell")


def test_the_report_counts_collapsed_seeds_and_the_negative_advantage_tail(db, crafted):
    rewards = {**IN_REGIME["rewards"], (8, "m2po"): (0.3, 0.88)}
    experiment = crafted(rewards=rewards, neg_ratio={(8, "m2po"): 100.0})
    fell = experiment.runs.get(sweep_values={"staleness.k": 8, "algorithm.objective": "m2po"}, seed=2)
    metrics_ingest(
        run=fell,
        attempt=1,
        points=[{"step": s, "key": "rollout/reward_mean", "value": 0.1, "time": 2.0e9 + s} for s in STEPS[-20:]],
    )  # its last fifth: a fall from ~0.8
    report = study_report(experiment, {})
    cells = {c.label: c.key for c in report.table.cells.values()}
    st = report.stability[cells["algorithm.objective=m2po, staleness.s=16"]]
    assert (st.collapsed, st.seeds) == (1, 3)
    assert (st.neg_ratio_median, st.neg_ratio_max) == (300.0, 400.0)  # 100 x (1 + seed) for seeds 1, 2, 3
    assert report.stability[cells["algorithm.objective=grpo, staleness.s=0"]].collapsed == 0
    iqm = report.table.cells[cells["algorithm.objective=m2po, staleness.s=16"]].iqm
    assert iqm.n == 3 and iqm.low <= iqm.mean <= iqm.high


def test_within_regime_on_crafted_verdicts():
    failing = RegimeCheck("m2", "M2 30x tau", False)
    testable = RegimeCheck("movement", "flat", False, claims.TESTABLE)
    unmeasured = RegimeCheck("near_det", "not measured", None)
    assert claims.within_regime(Verdict("c", REPRODUCED, "ok"), [failing]).status == OUTSIDE_REGIME
    assert claims.within_regime(Verdict("d", claims.INCONCLUSIVE, "short"), [failing]).status == claims.INCONCLUSIVE
    assert claims.within_regime(Verdict("c", NOT_REPRODUCED, "no"), [failing]).status == OUTSIDE_REGIME
    assert claims.within_regime(Verdict("b", REPRODUCED, "ok"), [testable]).status == OUTSIDE_REGIME
    assert claims.within_regime(Verdict("c", NOT_REPRODUCED, "no"), [unmeasured]).status == NOT_REPRODUCED
    few = claims.within_regime(Verdict("c", NOT_REPRODUCED, "no"), [RegimeCheck("seeds", "1 seed", False), failing])
    assert few.status == claims.INCONCLUSIVE and few.reason.startswith("1 seed") and len(few.checks) == 2


def test_a_third_swept_field_makes_arms_each_judged_on_its_own(db, alice, tiny_config, settings, tmp_path):
    """docs/STUDY.md's recipe for the dual-clip arm: algorithm.dual_clip_c [null, 3] beside staleness
    and the objective gives each arm its own four verdicts. Here stale M2PO falls short of on-policy
    without the dual clip and matches it with c = 3, so (b) differs between the arms."""
    settings.RUNS_DIR = tmp_path / "runs"
    experiment = experiment_create(
        owner=alice,
        name="arms",
        config=tiny_config,
        seeds=3,
        sweep={
            "staleness.k": [0, 8],
            "algorithm.objective": ["grpo", "m2po", "no_clip"],
            "algorithm.dual_clip_c": [None, 3.0],
        },
    )
    assert experiment.runs.count() == 2 * 3 * 2 * 3
    for run in experiment.runs.all():
        values = run.sweep_values
        cell = (values["staleness.k"], values["algorithm.objective"])
        start, end = IN_REGIME["rewards"][cell]
        if cell == (8, "m2po") and values["algorithm.dual_clip_c"] is None:
            end = 0.6  # stale M2PO without the dual clip ends 0.3 below on-policy
        _ingest(run, "rollout/reward_mean", [v + 0.01 * (run.seed - 1) for v in _ramp(start, end)])
        _ingest(run, "actor/m2", [IN_REGIME["m2"].get(cell, 0.01)] * len(STEPS))
        _ingest(run, "actor/near_det_frac", [0.8] * len(STEPS))
        _ingest(run, "actor/clip_frac", [IN_REGIME["fractions"].get(cell, 0.01)] * len(STEPS))
    experiment.runs.update(state="succeeded")

    verdicts = study_verdicts(build_table(list(experiment.runs.all()), metric="rollout/reward_mean"), SHORT_HORIZON)
    by_arm: dict[str, dict[str, Verdict]] = {}
    for v in verdicts:
        by_arm.setdefault(v.numbers["arm"], {})[v.claim] = v
    assert len(by_arm) == 2 and all(set(claims_) == {"a", "b", "c", "d"} for claims_ in by_arm.values())
    off, on = sorted(by_arm, key=lambda arm: "3" in arm)
    assert "dual_clip_c" in off and "dual_clip_c" in on and "3" in on
    assert by_arm[off]["b"].status == NOT_REPRODUCED and by_arm[on]["b"].status == REPRODUCED
    assert by_arm[off]["a"].status == by_arm[on]["a"].status == REPRODUCED  # the clip cells are alike in both arms


def test_the_runs_table_reads_the_ramp_from_the_logged_staleness(db, crafted):
    """The fractions and M2 after the ramp: the staleness the runs logged reaches 16 at update 40, and
    before it clip's fraction is ten times higher; the whole-run fraction sits beside."""
    experiment = crafted()
    for run in experiment.runs.filter(sweep_values__contains={"staleness.k": 8}):
        _ingest(run, "rollout/staleness_max", [min(16, s * 16 // 40) for s in STEPS])
        ramp = [0.2 if s < 40 else 0.02 for s in STEPS]
        metrics_ingest(
            run=run,
            attempt=1,
            points=[{"step": s, "key": "actor/clip_frac", "value": v, "time": 3.0e9 + s} for s, v in zip(STEPS, ramp)],
        )
    table = build_table(list(experiment.runs.all()), metric="rollout/reward_mean")
    rows = [r for r in study_rows(table)[""] if r.staleness == 16 and r.objective == "grpo"]
    assert len(rows) == 3 and all(r.updates_after_ramp == 400 - 40 for r in rows)
    assert rows[0].clipped_fraction == pytest.approx(0.02)
    assert rows[0].clipped_fraction_whole_run == pytest.approx((9 * 0.2 + 91 * 0.02) / 100)
    assert rows[0].warmup == "" and rows[0].lr == pytest.approx(1e-3)
