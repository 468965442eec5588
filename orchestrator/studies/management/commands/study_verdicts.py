"""Judge a study from a table of runs (one row per run; studies/run_table.py lists the columns), with
the same tests as the experiment page and `study_report`:

    python manage.py study_verdicts RUNS.csv --json
    python manage.py study_verdicts RUNS.csv --margin-a 0.03

The output is {"claims": {"a": {"verdict", "reason", "measured", "regime"}, "b": ..., "c": ..., "d": ...}};
a table with several learning rates judges each on its own, under "arms" (and "claims" is then the
lowest lr's).
"""

import json as jsonlib
import math
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from orchestrator.studies.budget import fit_budget
from orchestrator.studies.claims import Thresholds
from orchestrator.studies.judge import arms_of, claims_json, judge
from orchestrator.studies.run_table import RunTableError, read_runs_csv
from orchestrator.studies.verdicts import THRESHOLD_FIELDS


def _json_safe(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


class Command(BaseCommand):
    help = "Verdicts on the paper's four staleness claims from a CSV table of runs."

    def add_arguments(self, parser):
        parser.add_argument("runs", type=Path, help="the CSV table of runs")
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table for people")
        for name in THRESHOLD_FIELDS:
            parser.add_argument(
                f"--{name.replace('_', '-')}", type=float, dest=name, help=f"default {getattr(Thresholds(), name)}"
            )

    def handle(self, *args, runs: Path, json: bool = False, **options):
        if not runs.is_file():
            raise CommandError(f"runs: no such file: {runs}")
        values = {n: options[n] for n in THRESHOLD_FIELDS if options.get(n) is not None}
        bad = [n for n, v in values.items() if not math.isfinite(v) or v <= 0]
        if bad:
            raise CommandError(f"--{bad[0].replace('_', '-')}: must be a positive number")
        th = Thresholds(**values)
        try:
            rows = read_runs_csv(runs.read_text())
        except (RunTableError, UnicodeDecodeError) as exc:
            raise CommandError(f"{runs}: {exc}") from None
        budget = fit_budget(rows)  # the staleness-learning-rate budget, over every learning rate
        by_arm = {arm: judge(arm_rows, th, budget=budget) for arm, arm_rows in arms_of(rows).items()}
        first = next(iter(by_arm.values()))
        body = {"claims": claims_json(first), "budget": budget.as_dict()}
        if len(by_arm) > 1:
            body["arms"] = {arm: {"claims": claims_json(v)} for arm, v in by_arm.items()}
        if json:
            self.stdout.write(_dumps(_json_safe(body)))
            return
        for arm, verdicts in by_arm.items():
            if arm:
                self.stdout.write(f"[{arm}]")
            for v in verdicts:
                self.stdout.write(f"({v.claim}) {v.status}: {v.reason}")
                for c in v.checks:
                    mark = {True: "ok", False: "FAILED", None: "not measured"}[c.passed]
                    self.stdout.write(f"    {mark}: {c.text}")


def _dumps(body) -> str:
    return jsonlib.dumps(body, indent=1)
