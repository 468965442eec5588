"""Turn a Run into the backend-neutral JobSpec: files in the run directory, argv and env."""
import sys
from pathlib import Path

import yaml
from django.conf import settings

from orchestrator.cluster.backends.base import JobSpec
from orchestrator.experiments.models import Run
from trainer.reporting import atomic_write_text


def run_dir_for(run: Run) -> Path:
    return Path(run.run_dir) if run.run_dir else Path(settings.RUNS_DIR) / f"run-{run.pk}"


def write_run_files(run: Run, run_dir: Path) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "config.yaml"
    atomic_write_text(config_path, yaml.safe_dump(run.config, sort_keys=False))
    return config_path


def build_job_spec(run: Run, token: str, run_dir: Path) -> JobSpec:
    config_path = write_run_files(run, run_dir)
    python = settings.TRAINER_PYTHON or sys.executable
    argv = [python, "-m", "trainer", "run", "--config", str(config_path), "--run-dir", str(run_dir)]
    if run.attempt > 1:
        argv.append("--resume")
    env = {
        "OPL_DASHBOARD_URL": settings.PUBLIC_URL,
        "OPL_RUN_ID": str(run.pk),
        "OPL_RUN_TOKEN": token,
        "OPL_ATTEMPT": str(run.attempt),
    }
    return JobSpec(run_id=run.pk, attempt=run.attempt, run_dir=run_dir, argv=argv, env=env, gpus=run.gpus)
