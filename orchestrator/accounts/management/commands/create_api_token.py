from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError

from orchestrator.accounts.services import api_token_create


class Command(BaseCommand):
    help = "Create a personal API token for USER and print it (it is shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli")

    def handle(self, *args, username: str, name: str, **options):
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no such user: {username}")
        self.stdout.write(api_token_create(user=user, name=name))
