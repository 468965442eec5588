"""A fork through the orchestrator with real parts: a tiny parent run trains on CPU as a local
job; a fork created while the parent is still queued waits for it, pins the parent's update-1
checkpoint (which the parent's clean-up, keep 1, would delete) and, once submitted, starts from
exactly those weights."""

import time

import pytest
import torch
import yaml

from orchestrator.cluster.jobspec import build_job_spec, run_dir_for
from orchestrator.cluster.services import run_submit, sync_active_runs
from orchestrator.experiments.models import Run
from orchestrator.experiments.queue import runs_to_dispatch
from orchestrator.experiments.services import experiment_create
from trainer.ckpt import checkpoint as ckpt
from trainer.config import parse_config
from trainer.loop import Trainer

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stack(settings, tmp_path, live_server):
    settings.RUNS_DIR = tmp_path / "runs"
    settings.LOCAL_JOBS_DIR = tmp_path / "jobs"
    settings.PUBLIC_URL = live_server.url  # the trainer pushes its metrics here
    settings.MAX_ACTIVE_RUNS = 2
    return tmp_path


def _config(tiny_config):
    tiny_config.update(
        {
            "staleness": {"mode": "stale_k", "k": 0},
            # one demonstration per group: the random tiny model's rewards differ within every group,
            # so update 1 surely moves the weights the fork must start from (an all-zero step would not)
            "task": {"name": "arithmetic", "answer_format": "bare", "demonstrations": 1},
            "rollout": {**tiny_config["rollout"], "behav_logp": "recompute"},
            "algorithm": {"objective": "grpo", "updates_per_step": 1, "lr": 1e-2},
            "train": {"steps": 3, "seed": 1, "device": "cpu"},
            "checkpoint": {"every": 1, "keep": 1},  # alone, clean-up would keep only update 3
        }
    )
    return tiny_config


def _run_to_end(run_id: int, timeout: float = 240) -> Run:
    run_submit(run_id=run_id, backend_name="local")
    deadline = time.monotonic() + timeout
    run = Run.objects.get(pk=run_id)
    while not run.is_terminal and time.monotonic() < deadline:
        time.sleep(1)
        sync_active_runs("local")
        run.refresh_from_db()
    log = (run_dir_for(run) / "logs").glob("*")
    assert run.state == "succeeded", f"{run.state}: {run.state_reason}\n" + "\n".join(
        p.read_text()[-2000:] for p in log
    )
    return run


def test_a_fork_waits_for_its_parent_keeps_its_checkpoint_and_starts_from_its_weights(stack, alice, tiny_config):
    config = _config(tiny_config)
    parent = experiment_create(owner=alice, name="warmup", config=config).runs.get()
    child = experiment_create(
        owner=alice, name="fork", config={**config, "init": {"from_run": parent.pk, "from_step": 1}}
    ).runs.get()
    assert (child.parent_id, child.parent_step) == (parent.pk, 1)
    assert runs_to_dispatch() == [parent.pk]  # the fork waits: update 1 is not written yet

    parent = _run_to_end(parent.pk)
    parent_dir = run_dir_for(parent)
    assert [ckpt.checkpoint_step(c) for c in ckpt.list_checkpoints(parent_dir)] == [1, 3]  # 2 went; 1 is pinned
    assert ckpt.read_pins(parent_dir) == {1: [f"run {child.pk}"]}
    meta = ckpt.read_meta(parent_dir / "ckpt" / "step-00000003")  # what "best by metric" is judged on
    assert meta["step"] == 3 and 0.0 <= meta["metrics"]["train/reward_mean"] <= 1.0
    assert child.pk in runs_to_dispatch()

    # What the child's job reads: the orchestrator's config for it, the parent's folder resolved.
    child = Run.objects.get(pk=child.pk)
    build_job_spec(child, "unused-token", stack / "job-preview")
    job_config = yaml.safe_load((stack / "job-preview" / "config.yaml").read_text())
    assert job_config["init"]["from_path"] == str(parent_dir / "ckpt" / "step-00000001")
    trainer = Trainer(parse_config(job_config), stack / "child-at-step-0")
    trainer.setup()
    try:
        saved = ckpt.load_weights(parent_dir / "ckpt" / "step-00000001")["model"]
        mine = trainer.model.state_dict()
        assert trainer.version == 0 and all(torch.equal(mine[k], saved[k]) for k in saved)
        assert trainer.optimizer.state_dict()["state"] == {}  # weights only: a fresh optimizer
    finally:
        trainer.close()
    fresh = Trainer(parse_config(config), stack / "fresh")
    fresh.setup()
    try:  # the equality above means something: training moved the weights away from the seed's
        assert not all(torch.equal(fresh.model.state_dict()[k], saved[k]) for k in saved)
    finally:
        fresh.close()

    child = _run_to_end(child.pk)
    stdout = "\n".join(p.read_text() for p in (run_dir_for(child) / "logs").glob("*.out"))
    assert f"warm start from {parent_dir / 'ckpt' / 'step-00000001'} (update 1; weights, fresh optimizer)" in stdout
    assert [ckpt.checkpoint_step(c) for c in ckpt.list_checkpoints(parent_dir)] == [1, 3]
