from pathlib import Path

import yaml
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand

from orchestrator.accounts.services import api_token_create
from orchestrator.experiments.services import experiment_create


class Command(BaseCommand):
    help = "Create the demo user (printing login and an API token) and queue the demo experiment."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="demo")
        parser.add_argument("--password", required=True)
        parser.add_argument("--config", default=str(Path(settings.BASE_DIR) / "examples" / "demo-tiny.yaml"))

    def handle(self, *args, username: str, password: str, config: str, **options):
        user, _ = User.objects.get_or_create(username=username, defaults={"is_staff": True, "is_superuser": True})
        user.set_password(password)
        user.save()
        token = api_token_create(user=user, name="demo")
        experiment = experiment_create(
            owner=user, name="demo-m2po", project="demo", config=yaml.safe_load(Path(config).read_text())
        )
        run = experiment.runs.get()
        self.stdout.write(f"login:     {username} / {password}")
        self.stdout.write(f"api token: {token}")
        self.stdout.write(f"demo run:  {settings.PUBLIC_URL}/runs/{run.pk}/")
