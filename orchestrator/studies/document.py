"""A study's write-up (docs/STUDY.md) from what the product stored: the verdict table, the seed
statistics, the wall time, the runs, and the commands that reproduce it. The figures are PNGs the
product draws as its compare page does (studies/figures.py, exported by Plotly and Kaleido)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.experiments.experiment_file import dump_experiment_yaml
from orchestrator.experiments.models import Experiment, Run
from orchestrator.experiments.schema_form import minimal_config
from orchestrator.studies.report import StudyReport
from orchestrator.studies.table import as_markdown

CLAIMS = {
    "a": "stale clip (PPO/GRPO) ends clearly below on-policy",
    "b": "M2PO at the highest staleness matches on-policy",
    "c": "M2PO masks far fewer tokens than clip clips (paper: 0.06% vs 1.22%)",
    "d": "no-clip at the highest staleness collapses (or turns non-finite)",
}


@dataclass(frozen=True)
class Figure:
    path: str  # relative to the document
    caption: str


def wall_time(runs: list[Run]) -> tuple[datetime | None, datetime | None, float | None]:
    """(first start, last finish, minutes) over runs; None when a run has not finished."""
    starts = [r.started_at or r.submitted_at for r in runs if r.started_at or r.submitted_at]
    ends = [r.finished_at for r in runs]
    if not starts or any(e is None for e in ends):
        return (min(starts) if starts else None), None, None
    first, last = min(starts), max(ends)
    return first, last, (last - first).total_seconds() / 60


CHECK_MARKS = {True: "✓", False: "✗", None: "○"}  # passed, failed, not measured


def _check_text(check) -> str:
    return f"{CHECK_MARKS[check.passed]} {check.text}".replace("|", "\\|")


def _spread_text(numbers: dict) -> str:
    """Each compared cell's spread between warm-ups beside its seeds' within one, as the page shows it."""
    return "".join(
        f"<br>{cell}: SD between {sp['warmups']} warm-ups {sp['between_warmup_sd']:.3f}, "
        f"seeds within a warm-up {sp['within_warmup_seed_sd']:.3f}"
        for cell, sp in (numbers.get("spread") or {}).items()
        if sp.get("warmups", 0) > 1
    )


def verdict_rows(report: StudyReport) -> list[str]:
    rows = ["| claim | verdict | measured | regime checks |", "|---|---|---|---|"]
    for v in report.verdicts or []:
        arm = f" [{v.numbers['arm']}]" if v.numbers.get("arm") else ""
        checks = "<br>".join(_check_text(c) for c in v.checks) or "–"
        measured = v.reason + _spread_text(v.numbers)
        rows.append(f"| ({v.claim}) {CLAIMS[v.claim]}{arm} | **{v.status}** | {measured} | {checks} |")
    return rows


def _budget_rows(report: StudyReport) -> list[str]:
    """The staleness-learning-rate budget: each S·η group's final reward and collapse rate."""
    budget = report.budget
    if budget is None or not budget.groups:
        return []
    rows = [
        "## The staleness–learning-rate budget",
        "",
        f"Runs grouped by S·η (staleness in updates × lr; no-clip left out): {budget.text}. "
        "Each run's S·η and T·η are in the runs table.",
        "",
        "| S·η | staleness | lr | T·η | runs | final reward | collapsed |",
        "|---|---|---|---|---|---|---|",
    ]
    for g in budget.groups:
        reward = f"{g.final_reward:.3f}" if g.final_reward is not None else "–"
        drift = f"{g.t_lr:.3g}" if g.t_lr is not None else "–"
        rows.append(
            f"| {g.s_lr:.3g} | {'/'.join(map(str, g.staleness))} | {'/'.join(f'{v:g}' for v in g.lrs)} | {drift} "
            f"| {g.runs} | {reward} | {g.collapse_rate:.0%} |"
        )
    return rows + [""]


def _state_counts(runs: list[Run]) -> str:
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.state] = counts.get(r.state, 0) + 1
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


def study_markdown(
    *,
    experiment: Experiment,
    warmup: Run | None,
    report: StudyReport,
    figures: list[Figure],
    commands: list[str],
    machine: str,
    preset_path: str | None,
    notes: list[str] | None = None,
    runs_table: str | None = None,
) -> str:
    runs = list(experiment.runs.order_by("id"))
    everything = ([warmup] if warmup else []) + runs
    first, last, minutes = wall_time(everything)
    th = report.options.thresholds
    out = [
        f"# The staleness study on this machine: {experiment.name}",
        "",
        "Produced by the product (`python manage.py study_report`) from experiment "
        f"{experiment.pk}{f' and its warm-up run {warmup.pk}' if warmup else ''}: every number below comes from the "
        "metrics the runs streamed into the dashboard, and every image is a chart of the dashboard's compare page.",
        "",
        "## Set-up",
        "",
        f"- Machine: {machine}.",
        f"- Runs: {len(runs)} in the sweep ({_state_counts(runs)})"
        + (f", after 1 warm-up run ({warmup.state})." if warmup else "."),
        f"- Wall time, first start to last finish: **{minutes:.1f} min** ({first:%Y-%m-%d %H:%M} to {last:%H:%M} UTC)."
        if minutes is not None
        else "- Wall time: the study has not finished.",
        *[f"- {note}" for note in notes or []],
        f"- Study metric: `{report.table.metric}`, per run the {report.table.how.replace('_', ' ')} "
        "(the mean over the last 10% of updates unless said otherwise); per cell the mean over seeds with a 95% "
        "Student-t CI (at 5 seeds the percentile bootstrap covers about 83%, not 95%), differences with Welch's t. "
        "Beside it the IQM (interquartile mean) with a percentile bootstrap within the cell, rliable's stratified "
        "convention with one cell as one task; that interval is descriptive. "
        "The verdicts use the mean: with 5 seeds the IQM is the mean of the middle three, so a single collapsed "
        "seed, the event this study must show, vanishes from it; the mean keeps every seed, and each cell also counts "
        "its collapsed seeds.",
        f"- Verdict tests, fixed before the data: (a) the 95% t interval of on-policy minus stale clip on the "
        f"tail (paired by warm-up and seed) above {th.margin_a:g}; (b) two one-sided tests of M2PO against "
        f"on-policy at ±{th.equivalence_margin:g}, the same on no-clip as a negative control; (c) the masked "
        f"fraction after the staleness ramp ≤ {th.mask_ratio:g} × the clipped fraction; (d) a majority of "
        f"no-clip seeds end ≥ {th.collapse_margin:g} below their smoothed peak (or non-finite), judged only past "
        f"{th.collapse_horizon:g} updates after the ramp.",
        f"- Regime checks (the paper's regime), symmetric: median M2 before masking after the ramp ≤ "
        f"{th.m2_regime:g} × τ, ≥ {th.near_det_min:.0%} of tokens near-deterministic (entropy < 0.1 nats), "
        f"on-policy's reward moving by ≥ {th.movement_min * th.reward_range:g}, stale runs ≥ {th.run_length:g} × "
        f"their staleness in updates, no-clip's tail more than {th.collapse_margin * th.reward_range:g} below the "
        "ceiling, ≥ 2 seeds. A claim whose checks fail is 'outside the paper's regime' whichever way its numbers "
        "point, with the measured reason; 'not reproduced' means every check passed.",
        *(
            [
                f"- The runs as a table (one row per run, what the verdicts judge): [{runs_table}]({runs_table}); "
                "`python manage.py study_verdicts` on it gives the same verdicts."
            ]
            if runs_table
            else []
        ),
        "",
        "## Verdicts",
        "",
        *verdict_rows(report),
        "",
        "## Seed statistics",
        "",
        as_markdown(report.table, report.stability),
        *_budget_rows(report),
    ]
    if figures:
        out += ["## Curves (exported from the compare page)", ""]
        for fig in figures:
            out += [f"![{fig.caption}]({fig.path})", "", f"*{fig.caption}*", ""]
    out += ["## Reproduce", "", "```sh", *commands, "```", ""]
    if preset_path:
        out += [f"The preset (`{preset_path}`):", ""]
    spec = {
        "name": experiment.name,
        "project": experiment.project.name,
        "sweep": experiment.sweep,
        "seeds": experiment.seeds,
        "config": minimal_config(experiment.base_config),
    }
    out += [
        "The sweep as it ran (the fork source `init.from_run` is the warm-up run):",
        "",
        "```yaml",
        dump_experiment_yaml(spec).rstrip(),
        "```",
        "",
    ]
    if warmup:
        out += [
            "The warm-up run's config (its differences from the defaults):",
            "",
            "```yaml",
            dump_experiment_yaml({"name": warmup.name, "config": minimal_config(warmup.config)}).rstrip(),
            "```",
            "",
        ]
    return "\n".join(out)
