"""Store the metric and sample batches a run's trainer marked rejected (orchestrator.metrics.resend).
It lives in the samples app, the one above metrics, so that it may call both."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Store again the metric and sample batches the dashboard refused for good (marked in the run folder's "
        "metrics.rejected.jsonl and samples.rejected.jsonl), once the cause is fixed."
    )

    def add_arguments(self, parser):
        parser.add_argument("run", type=int, help="the run's id")
        parser.add_argument("--run-dir", type=Path, help="its run folder (default: where the dashboard put it)")

    def handle(self, *args, run, run_dir=None, **options):
        from orchestrator.experiments.models import Run
        from orchestrator.experiments.run_dirs import run_dir_for
        from orchestrator.metrics.resend import resend_metrics
        from orchestrator.samples.resend import resend_samples

        found = Run.objects.filter(pk=run).first()
        if found is None:
            raise CommandError(f"no run with id {run}")
        folder = run_dir or run_dir_for(found)
        if not folder.is_dir():
            raise CommandError(f"run {run}'s folder {folder} does not exist here (give --run-dir)")
        outcomes = resend_metrics(run=found, run_dir=folder) + resend_samples(run=found, run_dir=folder)
        for o in outcomes:
            self.stdout.write(f"{o.spool}: {o.lines} line(s): {o.detail}")
        stored = sum(o.stored for o in outcomes)
        self.stdout.write(
            f"{stored} of {len(outcomes)} rejected batch(es) stored; {len(outcomes) - stored} left marked"
            if outcomes
            else "nothing was marked rejected"
        )
        if stored < len(outcomes):
            raise CommandError(f"{len(outcomes) - stored} batch(es) are still marked rejected")
