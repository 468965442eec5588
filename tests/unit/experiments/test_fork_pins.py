"""A fork's pins: released when the fork ends without needing the parent's checkpoint
any more (succeeded, failed, cancelled, deleted), kept while it may still need it (queued,
running, lost), so the parent's clean-up can free the disk; viewers may not fork (a pin is a
write on the parent project's disk); the run page says how much disk pins hold."""

import json

import pytest

from orchestrator.experiments.models import Experiment, Membership, Run
from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.services import experiment_create, project_add_member, run_request_cancel, run_transition
from trainer.ckpt import checkpoint as ckpt

pytestmark = pytest.mark.django_db
S = Run.State


@pytest.fixture(autouse=True)
def runs_dir(settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    return settings.RUNS_DIR


def parent_run(owner, config):
    """An ended parent (4 steps x 2 updates, checkpoint every 2, keep 2) with 4 checkpoints on disk."""
    run = experiment_create(owner=owner, name="parent", project="lab", config=config).runs.get()
    for step in (2, 4, 6, 8):
        folder = folder_of(run) / ckpt.CKPT_DIR / f"step-{step:08d}"
        folder.mkdir(parents=True)
        (folder / "state.pt").write_bytes(b"x" * 1000)
    for to in (S.SUBMITTED, S.RUNNING, S.SUCCEEDED):
        run_transition(run=run, to=to)
    return run


def folder_of(run):
    from django.conf import settings

    return settings.RUNS_DIR / f"run-{run.pk}"


def fork(owner, config, parent, step=2, **kw):
    return experiment_create(
        owner=owner,
        name="fork",
        project="lab",
        config={**config, "init": {"from_run": parent.pk, "from_step": step}},
        **kw,
    )


def kept_after_cleanup(parent):
    ckpt.prune(folder_of(parent), ckpt.RetentionPolicy.from_config(parent.config["checkpoint"]))
    return [ckpt.checkpoint_step(c) for c in ckpt.list_checkpoints(folder_of(parent))]


@pytest.mark.parametrize(
    "path", [[S.SUBMITTED, S.RUNNING, S.SUCCEEDED], [S.SUBMITTED, S.RUNNING, S.FAILED], [S.CANCELLED]]
)
def test_a_fork_that_ends_releases_its_pin_and_the_parents_cleanup_frees_the_disk(
    alice, tiny_config, django_capture_on_commit_callbacks, path
):
    parent = parent_run(alice, tiny_config)
    child = fork(alice, tiny_config, parent).runs.get()
    assert ckpt.read_pins(folder_of(parent)) == {2: [f"run {child.pk}"]}
    assert kept_after_cleanup(parent) == [2, 6, 8]  # pinned: step 2 outlives the clean-up
    with django_capture_on_commit_callbacks(execute=True):
        for to in path:
            assert run_transition(run=child, to=to)
    assert ckpt.read_pins(folder_of(parent)) == {}
    assert kept_after_cleanup(parent) == [6, 8]


def test_a_fork_that_may_still_need_the_checkpoint_keeps_its_pin(
    alice, tiny_config, django_capture_on_commit_callbacks
):
    parent = parent_run(alice, tiny_config)
    child = fork(alice, tiny_config, parent).runs.get()
    with django_capture_on_commit_callbacks(execute=True):
        for to in (S.SUBMITTED, S.RUNNING, S.LOST):  # a lost job may still be running
            run_transition(run=child, to=to)
    assert ckpt.read_pins(folder_of(parent)) == {2: [f"run {child.pk}"]}


def test_a_cancelled_sweep_of_forks_releases_every_pin(alice, tiny_config, django_capture_on_commit_callbacks):
    from orchestrator.experiments.services import experiment_cancel

    parent = parent_run(alice, tiny_config)
    sweep = fork(alice, tiny_config, parent, sweep={"algorithm.lr": [0.001, 0.002, 0.003]})
    assert len(ckpt.read_pins(folder_of(parent))[2]) == 3
    with django_capture_on_commit_callbacks(execute=True):
        assert experiment_cancel(experiment=sweep) == 3
    assert ckpt.read_pins(folder_of(parent)) == {}


def test_deleting_a_fork_releases_its_pin(alice, tiny_config, django_capture_on_commit_callbacks):
    parent = parent_run(alice, tiny_config)
    experiment = fork(alice, tiny_config, parent)
    with django_capture_on_commit_callbacks(execute=True):
        Experiment.objects.filter(pk=experiment.pk).delete()  # the admin's delete, cascading to the runs
    assert ckpt.read_pins(folder_of(parent)) == {}


def test_other_pins_of_the_parent_stay(alice, tiny_config, django_capture_on_commit_callbacks):
    parent = parent_run(alice, tiny_config)
    first, second = fork(alice, tiny_config, parent).runs.get(), fork(alice, tiny_config, parent, step=4).runs.get()
    with django_capture_on_commit_callbacks(execute=True):
        run_request_cancel(run=first)
    assert ckpt.read_pins(folder_of(parent)) == {4: [f"run {second.pk}"]}


def test_a_viewer_may_not_fork(alice, bob, tiny_config, api_client):
    parent = parent_run(alice, tiny_config)
    project_add_member(project=parent.experiment.project, user=bob, role=Membership.Role.VIEWER)
    with pytest.raises(ConfigError) as refused:  # into their own project: still a pin on lab's disk
        experiment_create(
            owner=bob, name="mine", config={**tiny_config, "init": {"from_run": parent.pk, "from_step": 2}}
        )
    [error] = refused.value.errors
    assert error["field"] == "config.init.from_run" and "viewer" in error["message"]
    response = api_client(bob).post(
        "/api/v1/experiments",
        content_type="application/json",
        data=json.dumps(
            {
                "name": "mine",
                "config": {**tiny_config, "init": {"from_run": parent.pk, "from_step": 2}},
                "sweep": {"algorithm.lr": [0.001 * i for i in range(1, 50)]},
            }
        ),
    )
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["config.init.from_run"]
    assert ckpt.read_pins(folder_of(parent)) == {} and not Run.objects.filter(owner=bob).exists()
    project_add_member(project=parent.experiment.project, user=bob, role=Membership.Role.MEMBER)
    assert fork(bob, tiny_config, parent).runs.get().parent_id == parent.pk  # a member may


def test_the_run_page_shows_the_disk_pins_hold_and_offers_forks_only_to_writers(alice, bob, tiny_config, client):
    parent = parent_run(alice, tiny_config)
    fork(alice, tiny_config, parent)  # pins step 2, which the clean-up (newest 2) would delete
    fork(alice, tiny_config, parent, step=8)  # pins step 8, kept anyway as one of the newest
    client.force_login(alice)
    page = client.get(f"/runs/{parent.pk}/").content.decode()
    assert "Forks pin 2 checkpoints: 2.0\xa0KB, of which 1000\xa0bytes kept only for them" in page
    assert page.count("data-fork-step=") == 4
    project_add_member(project=parent.experiment.project, user=bob, role=Membership.Role.VIEWER)
    client.force_login(bob)
    page = client.get(f"/runs/{parent.pk}/").content.decode()
    assert "Forks pin 2 checkpoints" in page and "data-fork-step=" not in page
