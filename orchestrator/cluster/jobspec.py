"""Turn a Run into the backend-neutral JobSpec: files in the run directory, argv and env."""

import copy
import os
import sys
from pathlib import Path

import yaml
from django.conf import settings

from orchestrator.cluster.backends.base import BackendError, JobSpec
from orchestrator.experiments.config_paths import runs_named
from orchestrator.experiments.models import Run
from orchestrator.experiments.run_dirs import run_dir_for
from orchestrator.experiments.runconfig import data_roots
from orchestrator.launchers.jobs import LauncherUnavailable, is_launcher_run, launcher_job
from trainer.ckpt.checkpoint_files import add_pin, checkpoint_step, find_init_checkpoint
from trainer.config import PATH_ROOTS_ENV, ResourcesConfig
from trainer.launch import ALLOCATION_RENDEZVOUS, ONE_NODE_RENDEZVOUS
from trainer.reporting import atomic_write_text


def job_config(run: Run) -> dict:
    """The config as the job reads it: a fork's parent run (init.from_run) resolved to the folder
    of the checkpoint it starts from, as the job will see it. The stored config keeps the run
    reference; only the job's copy gains the path."""
    config = copy.deepcopy(run.config)
    init = config.get("init") or {}
    if init.get("from_run") is not None and not init.get("from_path"):
        if init.get("from_step") is None and run.parent_step is not None:
            init["from_step"] = run.parent_step  # fixed at the first submission: a retry starts from the same weights
        init["from_path"] = str(parent_checkpoint(run, int(init["from_run"]), init.get("from_step")))
        config["init"] = init
    return config


def parent_checkpoint(run: Run, parent_id: int, step: int | None) -> Path:
    """The parent's checkpoint folder. Dashboard and jobs share RUNS_DIR (the cluster's shared
    folder), so what is reachable here is reachable from the job; when it is not, the run fails
    with a reason that names both folders."""
    parent = Run.objects.filter(pk=parent_id).only("pk", "run_dir").first()
    if parent is None:
        raise BackendError(f"init.from_run: run {parent_id} does not exist", permanent=True)
    parent_dir = run_dir_for(parent)
    try:
        return find_init_checkpoint(parent_dir, step)
    except FileNotFoundError as exc:
        raise BackendError(
            f"init.from_run: run {parent_id}'s checkpoint is not reachable from run {run.pk}'s job "
            f"(parent folder {parent_dir}, this run's folder {run_dir_for(run)}): {exc}",
            permanent=True,
        ) from None


def pin_fork_source(run: Run, checkpoint: Path) -> None:
    """A fork's checkpoint, known for sure at submission: pinned in the parent's run folder so its
    clean-up keeps it (for this attempt and any retry), and recorded as the run's lineage when
    the fork was created before its parent ended (init.from_step null: the parent's newest)."""
    step = checkpoint_step(checkpoint)
    try:
        add_pin(checkpoint.parent.parent, step, f"run {run.pk}")
    except (OSError, ValueError) as exc:
        raise BackendError(f"init.from_run: cannot pin run {run.parent_id}'s checkpoint {checkpoint}: {exc}") from None
    if run.parent_step is None:
        Run.objects.filter(pk=run.pk, parent_step__isnull=True).update(parent_step=step)
        run.parent_step = step


def write_run_files(run: Run, run_dir: Path) -> Path:
    config = job_config(run)  # before anything is written: a bad fork source fails the run cleanly
    if run.parent_id is not None and config["init"].get("from_run") is not None:
        pin_fork_source(run, Path(config["init"]["from_path"]))
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "config.yaml"
    atomic_write_text(config_path, yaml.safe_dump(config, sort_keys=False))
    return config_path


def job_path_roots(run: Run) -> list[str]:
    """The folders the job may read, checked again by the trainer: the data roots, and the
    folders of the runs its config names (a fork's parent) that its owner may read."""
    return [str(p) for p in data_roots()] + [str(run_dir_for(named).resolve()) for named in runs_named(run)]


def launch_plan(config: dict, gpus: int) -> tuple[int, int]:
    """(nodes, training processes per node) of a run from its resources section: one process per
    GPU when the run holds GPUs, else one per CPU worker."""
    res = ResourcesConfig.model_validate(config.get("resources") or {})
    return res.nodes, res.processes_per_node(uses_gpus=gpus > 0)


def trainer_argv(python: str, trainer_args: list[str], nodes: int, per_node: int) -> list[str]:
    """`python -m trainer ...` for one process; else trainer.launch (torchrun) on each node, with
    a Slurm rendezvous when the run spans nodes. Every value is its own argument."""
    if nodes == 1 and per_node == 1:
        return [python, "-m", "trainer", *trainer_args]
    rendezvous = ALLOCATION_RENDEZVOUS if nodes > 1 else ONE_NODE_RENDEZVOUS
    return [
        python,
        "-m",
        "trainer.launch",
        "--nproc-per-node",
        str(per_node),
        "--nnodes",
        str(nodes),
        "--rendezvous",
        rendezvous,
        "--",
        *trainer_args,
    ]


def build_job_spec(run: Run, token: str, run_dir: Path) -> JobSpec:
    if is_launcher_run(run.config):
        return launcher_job_spec(run, token, run_dir)
    config_path = write_run_files(run, run_dir)
    python = settings.TRAINER_PYTHON or sys.executable
    trainer_args = ["run", "--config", str(config_path), "--run-dir", str(run_dir)]
    if run.attempt > 1:
        trainer_args.append("--resume")
    nodes, per_node = launch_plan(run.config, run.gpus)
    env = {
        "OPL_DASHBOARD_URL": settings.PUBLIC_URL,
        "OPL_RUN_ID": str(run.pk),
        "OPL_RUN_TOKEN": token,
        "OPL_ATTEMPT": str(run.attempt),
        PATH_ROOTS_ENV: os.pathsep.join(job_path_roots(run)),
    }
    return JobSpec(
        run_id=run.pk,
        attempt=run.attempt,
        run_dir=run_dir,
        argv=trainer_argv(python, trainer_args, nodes, per_node),
        env=env,
        gpus=run.gpus // nodes,
        cpus=per_node,
        nodes=nodes,
    )


def launcher_job_spec(run: Run, token: str, run_dir: Path) -> JobSpec:
    """A run of an admin-defined launcher: its command with the run's values, one argv entry
    each; the variables the `opl` SDK reads (OPL_URL, OPL_TOKEN, OPL_RUN_ID) beside the trainer's."""
    try:
        job = launcher_job(
            run.config,
            python=settings.TRAINER_PYTHON or sys.executable,
            repo=str(settings.BASE_DIR),
            run_dir=str(run_dir),
            run_id=run.pk,
            attempt=run.attempt,
        )
    except LauncherUnavailable as exc:
        raise BackendError(str(exc), permanent=True) from None
    if job.container:
        raise BackendError(f"launcher {job.name!r}: containers are not started by this dashboard yet", permanent=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {
        "OPL_URL": settings.PUBLIC_URL,
        "OPL_TOKEN": token,
        "OPL_RUN_ID": str(run.pk),
        "OPL_DASHBOARD_URL": settings.PUBLIC_URL,
        "OPL_RUN_TOKEN": token,
        "OPL_ATTEMPT": str(run.attempt),
        "OPL_RUN_DIR": str(run_dir),
        "OPL_LAUNCHER": job.name,
    }
    res = job.resources
    return JobSpec(
        run_id=run.pk,
        attempt=run.attempt,
        run_dir=run_dir,
        argv=job.argv,
        env=env,
        gpus=res.gpus,
        cpus=res.cpus,
        nodes=res.nodes,
        mem_gb=res.mem_gb,
        time_limit_min=res.time_limit_min,
    )
