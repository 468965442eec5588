"""A sweep's seed statistics and verdicts, from metrics stored through the real ingestion path into
PostgreSQL, to the experiment page's section and its CSV/JSON/Markdown exports. The numbers are
checked against values worked out by hand."""

import csv
import io
import json
import math
import re

import numpy as np
import pytest
from django.test import Client

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from orchestrator.studies.claims import Thresholds
from orchestrator.studies.report import study_report
from orchestrator.studies.table import as_markdown, build_table
from orchestrator.studies.verdicts import smoothed_peak, study_rows, study_verdicts, thresholds_from

pytestmark = pytest.mark.django_db

STEPS = list(range(2, 202, 2))  # 100 updates logged: the tail (last 10% of updates) is steps >= 182


def _curve(final: float, peak: float | None = None):
    """A reward curve that rises linearly to `peak` at the middle, then moves linearly to `final`
    at step 182 and stays flat there (so its tail mean is exactly `final`)."""
    peak = final if peak is None else peak
    out = []
    for s in STEPS:
        if s <= 100:
            out.append(peak * s / 100)
        elif s < 182:
            out.append(peak + (final - peak) * (s - 100) / 82)
        else:
            out.append(final)
    return out


def _ingest(run, key, values):
    metrics_ingest(
        run=run,
        attempt=1,
        points=[{"step": s, "key": key, "value": v, "time": 1.0e9 + s} for s, v in zip(STEPS, values, strict=True)],
    )


# tail reward per (staleness.k, objective), two seeds each, and the token fraction logged
FINALS = {
    (0, "grpo"): (0.80, 0.84),
    (8, "grpo"): (0.50, 0.56),
    (0, "m2po"): (0.78, 0.82),
    (8, "m2po"): (0.78, 0.80),
    (0, "no_clip"): (0.80, 0.80),
    (8, "no_clip"): (0.30, 0.34),
}
FRACTIONS = {(8, "grpo"): 0.05, (8, "m2po"): 0.002}


@pytest.fixture
def study(alice, tiny_config, settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    experiment = experiment_create(
        owner=alice,
        name="study",
        config=tiny_config,
        seeds=2,
        sweep={"staleness.k": [0, 8], "algorithm.objective": ["grpo", "m2po", "no_clip"]},
    )
    for run in experiment.runs.all():
        k, objective = run.sweep_values["staleness.k"], run.sweep_values["algorithm.objective"]
        seed_index = run.seed - tiny_config["train"]["seed"]
        final = FINALS[(k, objective)][seed_index]
        peak = 0.8 if (k, objective) == (8, "no_clip") else None  # prospered, then fell
        _ingest(run, "train/reward_mean", _curve(final, peak))
        _ingest(run, "actor/clip_frac", [FRACTIONS.get((k, objective), 0.01)] * len(STEPS))
    experiment.runs.update(state="succeeded")  # only finished runs count by default
    return experiment


def test_cells_hold_the_tail_mean_of_each_seed_with_hand_computed_intervals(study):
    table = build_table(list(study.runs.all()))
    cell = table.cells[json.dumps({"algorithm.objective": "grpo", "staleness.s": 16}, sort_keys=True)]
    assert sorted(cell.run_values.values()) == pytest.approx([0.50, 0.56])
    # two seeds: s = 0.0424, t_{1, 0.975} = 12.706, so 0.53 ± 0.381: honest about two seeds
    assert (cell.estimate.mean, cell.estimate.low, cell.estimate.high) == pytest.approx(
        (0.53, 0.1488, 0.9112), abs=1e-4
    )
    # against the same objective at staleness 0 (mean 0.82): -0.29, Welch: se = sqrt(0.0009 + 0.0004),
    # df = 0.0013^2 / (0.0009^2 + 0.0004^2) = 1.74
    assert cell.difference.mean == pytest.approx(-0.29)
    assert (cell.difference.low, cell.difference.high) == pytest.approx((-0.4693, -0.1107), abs=1e-4)
    on_policy = table.cells[json.dumps({"algorithm.objective": "grpo", "staleness.s": 0}, sort_keys=True)]
    assert on_policy.difference is None  # it is the reference


def test_a_chosen_reference_cell_and_other_summaries(study):
    runs = list(study.runs.all())
    table = build_table(runs, reference={"staleness.s": 0, "algorithm.objective": "m2po"})
    grpo_stale = table.cells[json.dumps({"algorithm.objective": "grpo", "staleness.s": 16}, sort_keys=True)]
    assert grpo_stale.difference.mean == pytest.approx(0.53 - 0.80)
    best = build_table(runs, how="best")
    no_clip = best.cells[json.dumps({"algorithm.objective": "no_clip", "staleness.s": 16}, sort_keys=True)]
    assert no_clip.estimate.mean == pytest.approx(0.8)  # its peak, not its tail
    with pytest.raises(ValueError, match="reference: no cell"):
        build_table(runs, reference={"staleness.k": 3})


def test_the_four_verdicts_on_a_staleness_by_objective_sweep(study):
    th = Thresholds(collapse_horizon=100)  # 200 updates: (d) judged past 100 after the ramp
    verdicts = {v.claim: v for v in study_verdicts(build_table(list(study.runs.all())), th)}
    assert verdicts["a"].status == "reproduced", verdicts["a"].reason  # paired 0.30, 0.28: [0.16, 0.42]
    # (b) with two seeds: M2PO is 0.03 below on-policy, and a 90% t interval on one degree of
    # freedom is ±0.063, far wider than the ±0.03 margin: equivalence cannot be shown
    assert verdicts["b"].status != "reproduced" and "not inside ±0.03" in verdicts["b"].reason
    assert verdicts["c"].status == "reproduced"  # 0.2% vs 5%: 0.04x
    assert verdicts["c"].numbers["ratio"] == pytest.approx(0.04)
    assert verdicts["d"].status == "reproduced", verdicts["d"].reason  # peak 0.8, tails 0.30/0.34
    assert verdicts["a"].numbers["high"] == 16 and verdicts["a"].numbers["clip_objective"] == "grpo"
    default = {v.claim: v for v in study_verdicts(build_table(list(study.runs.all())))}
    assert default["d"].status == "inconclusive"  # 200 updates: shorter than the paper's collapse horizon


def test_stricter_thresholds_turn_a_verdict_and_bad_ones_are_named(study):
    th, errors = thresholds_from({"margin_a": "0.5", "mask_ratio": "-1", "collapse_margin": "x"})
    assert th.margin_a == 0.5 and th.mask_ratio == 0.1 and th.collapse_margin == 0.1
    assert [e["field"] for e in errors] == ["mask_ratio", "collapse_margin"]
    verdicts = {v.claim: v for v in study_verdicts(build_table(list(study.runs.all())), th)}
    assert verdicts["a"].status == "not reproduced"  # [0.16, 0.42] lies below 0.5
    assert "below the 0.5 margin" in verdicts["a"].reason


def test_a_sweep_without_staleness_and_objective_gets_no_verdicts(alice, tiny_config, settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    experiment = experiment_create(owner=alice, name="lr", config=tiny_config, sweep={"algorithm.lr": [1e-3, 1e-4]})
    for run in experiment.runs.all():
        _ingest(run, "train/reward_mean", _curve(0.5))
    experiment.runs.update(state="succeeded")
    assert study_verdicts(build_table(list(experiment.runs.all()))) is None


def test_unfinished_runs_are_left_out_unless_asked_for(study):
    run = study.runs.get(sweep_values={"staleness.k": 8, "algorithm.objective": "grpo"}, seed=1)
    study.runs.filter(pk=run.pk).update(state="running")
    key = json.dumps({"algorithm.objective": "grpo", "staleness.s": 16}, sort_keys=True)
    cell = build_table(list(study.runs.all())).cells[key]
    assert cell.estimate.n == 1 and cell.left_out_text == "1 running"
    assert build_table(list(study.runs.all()), include_unfinished=True).cells[key].estimate.n == 2


def test_a_non_finite_value_counts_the_seed_out_and_decides_claim_d(study):
    run = study.runs.get(sweep_values={"staleness.k": 8, "algorithm.objective": "no_clip"}, seed=1)
    metrics_ingest(run=run, attempt=1, points=[{"step": 300, "key": "actor/pg_loss", "value": "nan", "time": 1.0e9}])
    th = Thresholds(collapse_horizon=100)
    verdicts = {v.claim: v for v in study_verdicts(build_table(list(study.runs.all())), th)}
    assert verdicts["d"].status == "reproduced" and "2 of 2 no-clip runs collapsed" in verdicts["d"].reason
    rows = study_rows(build_table(list(study.runs.all())))[""]
    nan_row = next(r for r in rows if r.objective == "no_clip" and r.staleness == 16 and r.seed == "1")
    assert nan_row.collapsed  # its loss turned non-finite: a collapse whatever its reward did


def test_smoothed_peak_is_the_best_moving_average():
    values = np.array([0.0] * 19 + [1.0] + [0.0] * 20)  # 40 points: a window of 2
    assert smoothed_peak(values) == pytest.approx(0.5)
    assert math.isnan(smoothed_peak(np.array([])))


def test_the_page_section_and_the_exports(alice, study):
    client = Client()
    client.force_login(alice)
    html = client.get(f"/experiments/{study.pk}/statistics").content.decode()
    assert 'id="study-heatmap"' in html and 'data-claim="a" data-status="reproduced"' in html
    assert "0.530 [0.149, 0.911]" in html
    assert "difference +0.290 [+0.163, +0.417] (95% t, paired)" in html  # (a)'s measured difference
    runs_csv = client.get(f"/experiments/{study.pk}/statistics.runs.csv").content.decode()
    runs = list(csv.DictReader(io.StringIO(runs_csv)))
    assert len(runs) == 12 and {r["staleness"] for r in runs} == {"0", "16"}
    stale_runs = sorted(float(r["tail"]) for r in runs if r["objective"] == "grpo" and r["staleness"] == "16")
    assert stale_runs == pytest.approx([0.50, 0.56])
    detail = client.get(f"/experiments/{study.pk}/").content.decode()
    assert f"/experiments/{study.pk}/statistics" in detail
    rows = list(csv.DictReader(io.StringIO(client.get(f"/experiments/{study.pk}/statistics.csv").content.decode())))
    assert len(rows) == 6 and {r["summary"] for r in rows} == {"tail_mean"}
    stale = next(r for r in rows if r["cell"] == "algorithm.objective=grpo, staleness.s=16")
    assert float(stale["mean"]) == pytest.approx(0.53) and float(stale["difference"]) == pytest.approx(-0.29)
    body = client.get(f"/experiments/{study.pk}/statistics.json?summary=last").json()
    assert body["summary"] == "last" and [v["claim"] for v in body["verdicts"]] == ["a", "b", "c", "d"]
    md = client.get(f"/experiments/{study.pk}/statistics.md").content.decode()
    # two seeds: the IQM (trim 25% of 2 = 0 each side) is the mean, with its (descriptive) bootstrap interval
    assert (
        "| algorithm.objective=grpo, staleness.s=16 | 2 | 0.530 [0.149, 0.911] | 0.530 [0.500, 0.560] | -0.290 [" in md
    )
    bad = client.get(f"/experiments/{study.pk}/statistics?summary=median&metric=nope").content.decode()
    assert 'data-field="summary"' in bad and 'data-field="metric"' in bad
    assert client.get(f"/experiments/{study.pk}/statistics.xlsx").status_code == 404


def test_the_statistics_are_login_and_access_checked(study, charlie):
    assert Client().get(f"/experiments/{study.pk}/statistics.csv").status_code == 302  # to the login page
    client = Client()
    client.force_login(charlie)
    assert client.get(f"/experiments/{study.pk}/statistics.csv").status_code == 404


def test_markdown_of_a_live_sweep_counts_runs_without_data(study, alice, tiny_config):
    extra = experiment_create(owner=alice, name="extra", config=tiny_config, seeds=2)
    table = build_table(list(extra.runs.all()))
    assert "| (no sweep) | 0 (2 queued left out) | – | – |" in as_markdown(table)
    assert study_report(extra, {}) is None
    client = Client()
    client.force_login(alice)
    empty = client.get(f"/experiments/{extra.pk}/statistics.csv")
    assert empty.status_code == 200 and "(no sweep),0,2 queued" in empty.content.decode()


def test_queue_study_queues_the_preset_and_names_a_missing_one(alice, capsys):
    from django.core.management import CommandError, call_command

    from orchestrator.experiments.models import Experiment, Run

    call_command("queue_study", "--user", "alice", "--dry-run")
    out = capsys.readouterr().out
    assert "cpu-staleness-study-warmup: 3 runs (every run below starts from each)" in out
    assert "36 run(s); nothing queued" in out
    call_command("queue_study", "--user", "alice")
    assert Experiment.objects.count() == 2 and Run.objects.count() == 3 + 36  # 3 warm-ups, 12 runs from each
    with pytest.raises(CommandError, match="--preset: no preset named 'nope'; presets: .*cpu-staleness-study"):
        call_command("queue_study", "--user", "alice", "--preset", "nope")


def test_study_report_without_figures_writes_verdicts_and_statistics(study, tmp_path):
    from django.core.management import call_command

    out = tmp_path / "STUDY.md"
    call_command("study_report", study.pk, "--user", "alice", "--no-figures", "--out", str(out))
    text = out.read_text()
    assert "| (a) stale clip (PPO/GRPO) ends clearly below on-policy | **reproduced** |" in text
    assert "| algorithm.objective=grpo, staleness.s=16 | 2 | 0.530 [0.149, 0.911] |" in text
    rows = (tmp_path / "study" / "runs.csv").read_text().splitlines()
    assert rows[0].startswith("objective,staleness,seed,warmup,lr,updates_after_ramp,tail,") and len(rows) == 13
    assert "[study/runs.csv](study/runs.csv)" in text
    assert "Wall time: the study has not finished." in text  # the runs never started here


def test_the_fresh_rollout_reward_is_the_default_study_metric(study):
    from orchestrator.studies.report import study_report as report_of

    assert report_of(study, {}).table.metric == "train/reward_mean"  # the only reward logged
    run = study.runs.first()
    _ingest(run, "rollout/reward_mean", _curve(0.5))
    assert report_of(study, {}).table.metric == "rollout/reward_mean"


def test_one_seed_says_no_ci_once_and_never_nan(alice, study):
    """With one seed per cell (the other seeds not finished), the heatmap says "n=1, no CI" once per
    cell, and the verdicts' measured numbers show the means and the note once, never "[nan, nan]"."""
    study.runs.filter(seed=study.runs.order_by("seed").last().seed).update(state="running")
    client = Client()
    client.force_login(alice)
    html = client.get(f"/experiments/{study.pk}/statistics").content.decode()
    assert "nan" not in re.sub(r"<[^>]*>", "", html)  # the text a person reads (data-* attributes aside)
    assert html.count("no CI") == html.count('class="study-n"')
    assert '<strong>0.500</strong><br><small class="study-n">n=1, no CI (1 running left out)</small>' in html
    assert "study-measured" not in html  # one run per cell: no interval of a difference to show
    assert "1 runs in the fewest cell compared" in html
