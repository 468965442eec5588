"""Write a study's document (docs/STUDY.md), its figures and its table of runs (docs/study/runs.csv,
which `study_verdicts` judges the same way) from a finished (or running) sweep.

    python manage.py study_report 12 --user alice --out docs/STUDY.md

The figures are the compare page's grouped charts, drawn from this database's series by Plotly and
exported by Kaleido (orchestrator/studies/figures.py); --no-figures writes the document without them.
"""

import os
import platform
from pathlib import Path

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError

from orchestrator.experiments.models import Experiment, Run
from orchestrator.studies.document import Figure, study_markdown
from orchestrator.studies.figures import FigureError, FigureSpec, draw
from orchestrator.studies.report import runs_csv, study_report
from orchestrator.studies.table import OBJECTIVE_PATH, staleness_path
from trainer.vocabulary import updates_per_step


def _machine() -> str:
    memory = ""
    try:
        kib = int(
            next(
                line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
            ).split()[1]
        )
        memory = f", {kib / 2**20:.0f} GiB of memory"
    except (OSError, StopIteration, ValueError):
        pass
    return f"{platform.machine()}, {os.cpu_count()} CPU cores{memory}, no GPU"


def figure_specs(experiment: Experiment, updates_per_step: int, keys: list[str]) -> list[FigureSpec]:
    """Reward of fresh rollouts by objective at each staleness, and the token fraction, M2 and
    entropy at the highest staleness (those the runs logged)."""
    runs = list(experiment.runs.order_by("id").values("id", "sweep_values"))
    paths = {p for r in runs for p in r["sweep_values"]}
    s_path = staleness_path(paths)
    if s_path is None or OBJECTIVE_PATH not in paths:
        return [FigureSpec("reward.png", "Reward of fresh rollouts", [r["id"] for r in runs], "", "rollout_reward")]
    levels = sorted({r["sweep_values"][s_path] for r in runs})

    def at(level):
        return [r["id"] for r in runs if r["sweep_values"][s_path] == level]

    def updates(level):
        return (
            f"{level} × {updates_per_step} = {level * updates_per_step} updates"
            if s_path == "staleness.k"
            else f"{level} updates"
        )

    specs = [
        FigureSpec(
            f"reward-{s_path.split('.')[-1]}{lvl}.png",
            f"Reward of fresh rollouts by objective, staleness {s_path}={lvl} ({updates(lvl)}); "
            "mean and min-max band over seeds",
            at(lvl),
            OBJECTIVE_PATH,
            "rollout_reward",
        )
        for lvl in levels
    ]
    top = levels[-1]
    taus = {
        str(tau_m2)
        for tau_m2 in Run.objects.filter(experiment=experiment).values_list("config__algorithm__tau_m2", flat=True)
    }
    tau = " / ".join(sorted(taus)) if taus else "the runs' tau_m2"
    if "actor/clip_frac" in keys:
        specs.append(
            FigureSpec(
                f"token-fraction-{s_path.split('.')[-1]}{top}.png",
                f"Masked (m2po) / clipped (grpo) token fraction at the highest staleness, {updates(top)}",
                at(top),
                OBJECTIVE_PATH,
                "clip_frac",
            )
        )
    if "actor/m2" in keys:
        specs.append(
            FigureSpec(
                f"m2-{s_path.split('.')[-1]}{top}.png",
                f"M2 before / after masking at the highest staleness, {updates(top)} (log scale; tau = {tau})",
                at(top),
                OBJECTIVE_PATH,
                "m2",
            )
        )
    if "actor/entropy" in keys:
        specs.append(
            FigureSpec(
                f"entropy-{s_path.split('.')[-1]}{top}.png",
                f"Entropy at the highest staleness, {updates(top)}",
                at(top),
                OBJECTIVE_PATH,
                "entropy",
            )
        )
    return specs


class Command(BaseCommand):
    help = "Write docs/STUDY.md (verdicts, seed statistics, wall time, figures) for a staleness sweep."

    def add_arguments(self, parser):
        parser.add_argument("experiment", type=int, help="the sweep's experiment id")
        parser.add_argument("--user", required=True, help="who writes the report (must exist)")
        parser.add_argument("--out", type=Path, default=Path("docs/STUDY.md"))
        parser.add_argument("--no-figures", action="store_true")
        parser.add_argument("--command", action="append", default=[], help="a reproduce command to list (repeatable)")
        parser.add_argument(
            "--appendix",
            type=Path,
            action="append",
            default=[],
            help="a Markdown file appended as is, e.g. how the preset was calibrated (repeatable, in order)",
        )
        parser.add_argument(
            "--note",
            action="append",
            default=[],
            help="a line added to the set-up list, e.g. the load average at start and end (repeatable)",
        )

    def handle(
        self,
        *args,
        experiment: int,
        user: str,
        out: Path,
        no_figures=False,
        command=(),
        appendix=(),
        note=(),
        **options,
    ):
        for path in appendix:
            if not path.is_file():
                raise CommandError(f"--appendix: no such file: {path}")
        found = Experiment.objects.filter(pk=experiment).first()
        if found is None:
            raise CommandError(f"experiment: no experiment {experiment}")
        owner = User.objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"--user: no user named {user!r}")
        report = study_report(found, {})
        if report is None:
            raise CommandError(f"experiment {experiment}: no run has reported metrics yet")
        parents = set(found.runs.values_list("parent_id", flat=True))
        warmup = (
            Run.objects.filter(pk=next(iter(parents))).first() if len(parents) == 1 and None not in parents else None
        )
        note = list(note)
        if len(parents - {None}) > 1:  # seeds nested in several warm-ups (warmup_run.count)
            ids = ", ".join(str(p) for p in sorted(parents - {None}))
            note.append(f"Forked from {len(parents - {None})} warm-up runs ({ids}), every cell's seeds from each.")
        image_dir = out.parent / out.stem.lower()
        image_dir.mkdir(parents=True, exist_ok=True)
        runs_path = image_dir / "runs.csv"  # the table of runs the verdicts judge: study_verdicts reads it
        runs_path.write_text(runs_csv(report.table, report.options.thresholds))
        figures = []
        if not no_figures:
            specs = figure_specs(found, updates_per_step(found.base_config), report.keys)
            try:
                draw(specs, image_dir)
            except FigureError as exc:
                raise CommandError(f"figures: {exc}") from None
            figures = [Figure(f"{image_dir.name}/{s.filename}", s.caption) for s in specs]
        commands = list(command) or [
            "make demo   # the dashboard, a worker and the local backend on this machine",
            f"python manage.py queue_study --user {user}   # or: New experiment > preset 'CPU staleness study'",
            f"python manage.py study_report <experiment id> --user {user}",
        ]
        text = study_markdown(
            experiment=found,
            warmup=warmup,
            report=report,
            figures=figures,
            commands=commands,
            machine=_machine(),
            preset_path=None,
            notes=list(note),
            runs_table=f"{image_dir.name}/{runs_path.name}",
        )
        for path in appendix:
            text = text.rstrip() + "\n\n" + path.read_text()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        self.stdout.write(self.style.SUCCESS(f"wrote {out} with {len(figures)} figure(s)"))
