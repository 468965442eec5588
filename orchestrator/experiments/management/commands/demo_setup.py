"""`make demo`'s last step: the demo user, its API token and the demo run, printed for the reader.

Run again on each start of the demo, it changes nothing a user relies on: the password's hash is
kept when the password is the same (a new hash would log every browser out), the API token kept in
--token-file is reused while valid, and the demo run is queued once (--new-run queues another)."""

import os
from pathlib import Path

import yaml
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand

from orchestrator.accounts.services import api_token_create, api_token_lookup
from orchestrator.experiments.models import Experiment
from orchestrator.experiments.services import experiment_create

DEMO_EXPERIMENT, DEMO_PROJECT = "demo-m2po", "demo"


class Command(BaseCommand):
    help = "Create the demo user (printing login and an API token) and queue the demo experiment once."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="demo")
        parser.add_argument("--password", required=True)
        parser.add_argument("--config", default=str(Path(settings.BASE_DIR) / "examples" / "demo-tiny.yaml"))
        parser.add_argument("--token-file", help="keep the API token in this file and reuse it on later starts")
        parser.add_argument("--new-run", action="store_true", help="queue another demo run even if one exists")

    def handle(self, *args, username: str, password: str, config: str, token_file: str | None, new_run: bool, **_):
        user, created = User.objects.get_or_create(username=username, defaults={"is_staff": True, "is_superuser": True})
        if created or not user.check_password(password):
            user.set_password(password)
            user.save()
        token = demo_token(user, Path(token_file) if token_file else None)
        experiment = (
            Experiment.objects.filter(owner=user, name=DEMO_EXPERIMENT, project__name=DEMO_PROJECT)
            .order_by("-id")
            .first()
        )
        queued = experiment is None or new_run
        if queued:
            experiment = experiment_create(
                owner=user, name=DEMO_EXPERIMENT, project=DEMO_PROJECT, config=yaml.safe_load(Path(config).read_text())
            )
        run = experiment.runs.order_by("-id").first()
        self.stdout.write(f"login:     {username} / {password}")
        self.stdout.write(f"api token: {token}")
        again = "DEMO_NEW_RUN=1 make demo queues another"
        state = "queued now" if queued else f"{run.state}, from an earlier start; {again}"
        self.stdout.write(f"demo run:  {settings.PUBLIC_URL}/runs/{run.pk}/ ({state})")


def demo_token(user: User, path: Path | None) -> str:
    """The token kept in `path` while it is still valid for `user`, else a new one written there."""
    if path is not None and path.is_file():
        kept = path.read_text().strip()
        found = api_token_lookup(kept) if kept else None
        if found is not None and found.user_id == user.pk:
            return kept
    token = api_token_create(user=user, name="demo")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
    return token
