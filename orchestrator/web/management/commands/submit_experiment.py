"""Queue an experiment from a YAML file: a plain run config or an experiment file with a sweep.

python manage.py submit_experiment examples/presets/paper-staleness-x-objective-36.yaml --user alice
"""

from pathlib import Path

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError
from django.http import Http404
from pydantic import ValidationError

from orchestrator.experiments.experiment_file import parse_experiment_yaml
from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.schemas import ExperimentIn
from orchestrator.experiments.services import experiment_plan
from orchestrator.lib.api import pydantic_errors
from orchestrator.studies.warmup import check_warmup, experiment_create_with_warmup, forks_planned


def _problems(file: Path, errors: list[dict]) -> str:
    return f"{file}: invalid experiment:\n" + "\n".join(f"  {e['field']}: {e['message']}" for e in errors)


class Command(BaseCommand):
    help = "Validate an experiment YAML file, expand its sweep and queue its runs."

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--user", required=True, help="owner of the experiment")
        parser.add_argument("--name", help="overrides the file's name")
        parser.add_argument("--project", help="overrides the file's project")
        parser.add_argument("--dry-run", action="store_true", help="print the runs without queuing them")

    def handle(self, *args, file: Path, user: str, name=None, project=None, dry_run=False, **options):
        if not file.is_file():
            raise CommandError(f"no such file: {file}")
        owner = User.objects.filter(username=user).first()
        if owner is None:
            raise CommandError(f"--user: no user named {user!r}")
        try:
            raw = parse_experiment_yaml(file.read_text(), default_name=file.stem)
            raw.update({k: v for k, v in (("name", name), ("project", project)) if v})
            spec = ExperimentIn.model_validate({k: v for k, v in raw.items() if v is not None}).model_dump()
            if dry_run:
                warmups = check_warmup(spec["name"], spec["config"], spec["warmup_run"])
                if warmups == 1:
                    self.stdout.write(spec["name"] + "-warmup (every run below starts from it)")
                elif warmups:
                    self.stdout.write(f"{spec['name']}-warmup: {warmups} runs (every run below starts from each)")
                planned = experiment_plan(
                    name=spec["name"],
                    config=spec["config"],
                    sweep=spec["sweep"],
                    random=spec["random"],
                    seeds=spec["seeds"],
                )
                planned = forks_planned(planned, spec["warmup_run"])
                for plan in planned:
                    self.stdout.write(plan.name)
                self.stdout.write(f"{len(planned)} run(s); nothing queued (--dry-run)")
                return
            experiment = experiment_create_with_warmup(owner=owner, **spec)
        except ConfigError as exc:
            raise CommandError(_problems(file, exc.errors)) from None
        except ValidationError as exc:
            raise CommandError(_problems(file, pydantic_errors(exc))) from None
        except (Http404, PermissionDenied) as exc:  # another team's project, or a viewer's
            raise CommandError(f"project: {exc}") from None
        count = experiment.runs.count()
        warm = " after its warm-up run" if spec.get("warmup_run") else ""
        self.stdout.write(
            self.style.SUCCESS(f"experiment {experiment.pk} ({experiment.name}): {count} run(s) queued{warm}")
        )
