"""Who may name which run folder in a run config's paths (runconfig.submitted_path_problems holds the rules).

`run_reader(user)` is what validation asks before it accepts a path in another run's folder: the
access helpers' answer, so a run the user cannot read and one that does not exist look the same.
`runs_named(run)` are the runs whose folders a run's job may read (its fork parent, and the runs
its paths name), checked again for the run's owner when the job is submitted.
"""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth.models import User
from django.db.models import QuerySet

from orchestrator.experiments.access import visible_runs
from orchestrator.experiments.models import Run
from orchestrator.experiments.runconfig import MayReadRun, run_folder_of
from trainer.config import file_values


def run_reader(user: User) -> MayReadRun:
    def may_read(run_id: int) -> bool:
        return visible_runs(user).filter(pk=run_id).exists()

    return may_read


def runs_named(run: Run) -> QuerySet[Run]:
    """The runs whose folders this run's config names (init.from_run, and stored paths in a run's
    folder) that its owner may read now."""
    config = run.config or {}
    ids = set()
    if (parent := (config.get("init") or {}).get("from_run")) is not None:
        ids.add(int(parent))
    for _section, _key, value in file_values(config):
        if Path(value).is_absolute():
            _in_runs, run_id = run_folder_of(Path(value))
            if run_id is not None:
                ids.add(run_id)
    return visible_runs(run.owner).filter(pk__in=ids)
