"""Queue the bundled CPU staleness study: on-policy warm-up runs, then a sweep over staleness x
{grpo, no_clip, m2po} x 2 seeds forked from each of its 3 warm-ups
(examples/presets/cpu-staleness-study.yaml).

    python manage.py queue_study --user alice
    python manage.py queue_study --user alice --preset paper-staleness-x-objective-36 --dry-run

The experiment page then shows the seed statistics and the verdicts on the paper's four claims.
"""

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from orchestrator.experiments.presets import get_preset, list_presets

STUDY_PRESET = "cpu-staleness-study"


class Command(BaseCommand):
    help = "Queue the staleness study preset (warm-up run plus forked sweep) in one step."

    def add_arguments(self, parser):
        parser.add_argument("--user", required=True, help="owner of the experiments")
        parser.add_argument("--preset", default=STUDY_PRESET, help=f"a preset of the form (default {STUDY_PRESET})")
        parser.add_argument("--name", help="overrides the preset's experiment name")
        parser.add_argument("--project", help="overrides the preset's project")
        parser.add_argument("--dry-run", action="store_true", help="print the runs without queuing them")

    def handle(self, *args, user: str, preset: str, name=None, project=None, dry_run=False, **options):
        found = get_preset(preset)
        if found is None:
            known = ", ".join(p.slug for p in list_presets())
            raise CommandError(f"--preset: no preset named {preset!r}; presets: {known}")
        call_command(
            "submit_experiment",
            str(found.path),
            user=user,
            name=name,
            project=project,
            dry_run=dry_run,
            stdout=self.stdout,
            stderr=self.stderr,
        )
