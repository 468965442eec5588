"""A fork (init.from_run) reaches its job as the parent's checkpoint folder; a parent whose
checkpoint the job cannot reach fails the run with a reason naming both folders."""

import pytest
import yaml

from orchestrator.cluster.backends.base import BackendError
from orchestrator.cluster.jobspec import build_job_spec
from orchestrator.cluster.services import run_submit
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create
from trainer.ckpt.checkpoint import read_pins

pytestmark = pytest.mark.django_db


def _runs(alice, settings, tmp_path, init: dict, steps=()):
    settings.RUNS_DIR = tmp_path / "runs"
    settings.LOCAL_JOBS_DIR = tmp_path / "jobs"
    parent = experiment_create(owner=alice, name="parent", config={}).runs.get()
    for step in steps:  # before the fork: its creation checks the step exists (or will)
        _checkpoint(tmp_path / "runs" / f"run-{parent.pk}", step)
    child = experiment_create(owner=alice, name="child", config={"init": {"from_run": parent.pk, **init}}).runs.get()
    return parent, child


def _checkpoint(run_dir, step):
    folder = run_dir / "ckpt" / f"step-{step:08d}"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(b"")  # find_init_checkpoint only looks for the files
    return folder


def test_the_job_reads_the_parents_checkpoint_folder(alice, settings, tmp_path):
    parent, child = _runs(alice, settings, tmp_path, {"from_step": 4}, steps=(2, 4, 6))
    at_4 = tmp_path / "runs" / f"run-{parent.pk}" / "ckpt" / "step-00000004"
    build_job_spec(child, "t", tmp_path / "child")
    written = yaml.safe_load((tmp_path / "child" / "config.yaml").read_text())
    assert (written["init"]["from_run"], written["init"]["from_step"], written["init"]["from_path"]) == (
        parent.pk,
        4,
        str(at_4),
    )
    assert Run.objects.get(pk=child.pk).config["init"]["from_path"] is None  # stored as asked: by run and step


def test_a_fork_made_before_its_parent_ended_records_and_pins_the_step_at_submission(alice, settings, tmp_path):
    parent, child = _runs(alice, settings, tmp_path, {})  # the parent's final checkpoint, whatever its step
    assert child.parent_step is None
    _checkpoint(tmp_path / "runs" / f"run-{parent.pk}", 8)
    build_job_spec(child, "t", tmp_path / "child")
    assert Run.objects.get(pk=child.pk).parent_step == 8
    assert read_pins(tmp_path / "runs" / f"run-{parent.pk}") == {8: [f"run {child.pk}"]}
    _checkpoint(tmp_path / "runs" / f"run-{parent.pk}", 10)  # the parent went on (retried, say)
    build_job_spec(Run.objects.get(pk=child.pk), "t", tmp_path / "child")  # the fork's retry
    written = yaml.safe_load((tmp_path / "child" / "config.yaml").read_text())
    assert written["init"]["from_path"].endswith("step-00000008")  # the same weights as its first attempt


def test_an_unreachable_parent_checkpoint_fails_the_run_naming_both_folders(alice, settings, tmp_path):
    parent, child = _runs(alice, settings, tmp_path, {})
    with pytest.raises(BackendError, match="init.from_run"):
        run_submit(run_id=child.pk, backend_name="local")
    child.refresh_from_db()
    assert child.state == Run.State.FAILED
    assert f"run-{parent.pk}" in child.state_reason and f"run-{child.pk}" in child.state_reason
    assert "init.from_run" in child.state_reason
