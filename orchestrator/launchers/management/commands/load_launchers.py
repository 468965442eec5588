"""`manage.py load_launchers FILE.yaml`: create or replace the launchers a YAML file defines.

The file is a list of launcher definitions (or {"launchers": [...]}). Every definition is
checked before any is written: one bad field names the launcher and the field, and nothing
changes.
"""

from pathlib import Path

import yaml
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from orchestrator.launchers.definition import DefinitionError, parse_definition
from orchestrator.launchers.services import launcher_upsert


class Command(BaseCommand):
    help = "Create or replace launchers from a YAML file (a list of definitions)."

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path)
        parser.add_argument("--user", default="", help="the staff user recorded as creator of new launchers")

    def handle(self, *args, file: Path, user: str, **options):
        try:
            data = yaml.safe_load(file.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise CommandError(f"{file}: {exc}") from None
        if isinstance(data, dict) and "launchers" in data:
            data = data["launchers"]
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
            raise CommandError(f"{file}: expected a list of launcher definitions")
        by = None
        if user:
            by = User.objects.filter(username=user).first()
            if by is None or not by.is_staff:
                raise CommandError(f"--user: {user!r} is not a staff user")
        problems = []
        for i, entry in enumerate(data):
            try:
                parse_definition(entry)
            except DefinitionError as exc:
                label = entry.get("name") if isinstance(entry.get("name"), str) else f"#{i + 1}"
                problems += [f"{file}: launcher {label}: {e['field']}: {e['message']}" for e in exc.errors]
        if problems:
            raise CommandError("\n".join(problems))
        with transaction.atomic():
            for entry in data:
                launcher, created = launcher_upsert(by=by, data=entry)
                self.stdout.write(f"{'created' if created else 'updated'} launcher {launcher.name}")
