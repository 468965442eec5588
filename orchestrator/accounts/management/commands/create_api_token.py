from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError

from orchestrator.accounts.models import ApiToken
from orchestrator.accounts.services import DEFAULT_DAYS, TokenError, api_token_create


class Command(BaseCommand):
    help = "Create a personal API token for USER and print it (it is shown only once)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="cli")
        parser.add_argument("--days", type=int, default=DEFAULT_DAYS, help=f"lifetime in days (default {DEFAULT_DAYS})")
        parser.add_argument("--read-only", action="store_true", help="the token may only read (GET)")

    def handle(self, *args, username: str, name: str, days: int, read_only: bool, **options):
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no such user: {username}")
        scope = ApiToken.Scope.READ if read_only else ApiToken.Scope.WRITE
        try:
            self.stdout.write(api_token_create(user=user, name=name, days=days, scope=scope))
        except TokenError as exc:
            raise CommandError(str(exc)) from None
