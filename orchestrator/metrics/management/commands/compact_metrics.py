"""Merge small metric chunks (what beat does every 5 minutes for recent runs)."""

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = "Merge the small metric chunks of runs, leaving each run's last live-replay batches alone."

    def add_arguments(self, parser):
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument("--run", type=int, action="append", help="only this run (repeatable)")
        scope.add_argument("--all", action="store_true", help="every run, not only recent ones")

    def handle(self, *args, run=None, all=False, **options):
        from orchestrator.experiments.models import Run
        from orchestrator.metrics import live, store
        from orchestrator.metrics.services import compact_recent_runs

        if run or all:
            ids = (
                list(Run.objects.filter(pk__in=run).values_list("pk", flat=True))
                if run
                else list(Run.objects.values_list("pk", flat=True))
            )
            if run and len(ids) != len(set(run)):
                raise CommandError(f"--run: no run with id {sorted(set(run) - set(ids))}")
            removed = sum(store.compact_chunks(rid, keep_batches=live.MAX_REPLAY_BATCHES) for rid in ids)
        else:
            removed = compact_recent_runs()
        self.stdout.write(f"{removed} chunk(s) merged away")
