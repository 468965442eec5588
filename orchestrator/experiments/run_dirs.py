"""Where a run's files live: the folder the backend recorded for it, else RUNS_DIR/run-<id>.

It sits beside the Run model so that experiments (forks, checkpoints), the cluster (job specs)
and samples all import it downward."""

from pathlib import Path

from django.conf import settings

from orchestrator.experiments.models import Run


def run_dir_for(run: Run) -> Path:
    return Path(run.run_dir) if run.run_dir else Path(settings.RUNS_DIR) / f"run-{run.pk}"
