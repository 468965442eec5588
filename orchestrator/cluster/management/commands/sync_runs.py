"""Sync the states of active runs from their cluster backends once (what beat does every 3 s)."""

from django.core.management.base import BaseCommand

from orchestrator.cluster.services import sync_active_runs


class Command(BaseCommand):
    help = "Ask each cluster backend once about every active run and record what changed."

    def add_arguments(self, parser):
        parser.add_argument("--backend", help="only runs on this backend (local, slurm)")

    def handle(self, *args, backend=None, **options):
        changed = sync_active_runs(backend)
        self.stdout.write(f"{changed} run(s) changed")
