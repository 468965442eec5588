"""Forks at creation (config init.from_run / init.from_step): lineage stored, the parent's
checkpoint checked and pinned, clear errors naming the field; a sweep forks every cell from one
checkpoint through the API, the form and an experiment file; the queue holds a fork until its
parent has written the checkpoint."""

import json

import pytest

from orchestrator.experiments.experiment_file import parse_experiment_yaml
from orchestrator.experiments.models import Run
from orchestrator.experiments.queue import runs_to_dispatch, waiting_reasons
from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.services import experiment_create, project_add_member, run_transition
from orchestrator.web.experiment_form import flat_from_spec
from trainer.ckpt import checkpoint as ckpt

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def runs_dir(settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    settings.MAX_ACTIVE_RUNS = 10
    return settings.RUNS_DIR


def _parent(owner, tiny_config, *, state=Run.State.SUCCEEDED, steps=(2, 4, 6, 8)):
    """A parent run (train.steps 4 x 2 updates, checkpoint every 2) with checkpoints on disk."""
    run = experiment_create(owner=owner, name="warmup", project="lab", config=tiny_config).runs.get()
    for step in steps:
        folder = _dir(run) / ckpt.CKPT_DIR / f"step-{step:08d}"
        folder.mkdir(parents=True)
        (folder / "state.pt").write_bytes(b"x" * 10)
    path = {Run.State.QUEUED: [], Run.State.RUNNING: [Run.State.SUBMITTED, Run.State.RUNNING]}.get(
        state, [Run.State.SUBMITTED, Run.State.RUNNING, state]
    )
    for to in path:
        run_transition(run=run, to=to)
    return Run.objects.get(pk=run.pk)


def _dir(run):
    from django.conf import settings

    return settings.RUNS_DIR / f"run-{run.pk}"


def _fork(owner, config, init, **kw):
    return experiment_create(owner=owner, name="fork", project="lab", config={**config, "init": init}, **kw)


def _error(exc_info):
    [error] = exc_info.value.errors
    return error["field"], error["message"]


def test_a_fork_stores_its_lineage_and_pins_the_parents_checkpoint(alice, tiny_config):
    parent = _parent(alice, tiny_config)
    child = _fork(alice, tiny_config, {"from_run": parent.pk, "from_step": 4}).runs.get()
    assert (child.parent_id, child.parent_step) == (parent.pk, 4)
    assert list(parent.children.all()) == [child]
    assert ckpt.read_pins(_dir(parent)) == {4: [f"run {child.pk}"]}
    assert child.to_dict()["parent"] == parent.pk and child.to_dict()["parent_step"] == 4


def test_no_step_on_an_ended_parent_means_its_newest_checkpoint_fixed_at_creation(alice, tiny_config):
    parent = _parent(alice, tiny_config)
    child = _fork(alice, tiny_config, {"from_run": parent.pk}).runs.get()
    assert child.parent_step == 8 and child.config["init"]["from_step"] == 8
    assert ckpt.read_pins(_dir(parent)) == {8: [f"run {child.pk}"]}


def test_a_run_the_user_cannot_read_is_refused_as_if_it_did_not_exist(alice, charlie, tiny_config):
    parent = _parent(alice, tiny_config)
    with pytest.raises(ConfigError) as hidden:
        _fork(charlie, tiny_config, {"from_run": parent.pk})
    with pytest.raises(ConfigError) as missing:
        _fork(charlie, tiny_config, {"from_run": parent.pk + 1000})
    assert _error(hidden) == ("config.init.from_run", f"run {parent.pk} does not exist or you cannot read it")
    assert _error(missing)[1] == f"run {parent.pk + 1000} does not exist or you cannot read it"
    assert not Run.objects.filter(owner=charlie).exists()
    assert ckpt.read_pins(_dir(parent)) == {}


def test_a_project_member_may_fork_a_run_they_can_read(alice, bob, tiny_config):
    parent = _parent(alice, tiny_config)
    project_add_member(project=parent.experiment.project, user=bob)
    child = _fork(bob, tiny_config, {"from_run": parent.pk, "from_step": 2}).runs.get()
    assert child.parent_id == parent.pk and child.owner == bob


def test_a_missing_step_of_an_ended_parent_names_the_steps_it_has(alice, tiny_config):
    parent = _parent(alice, tiny_config, steps=(6, 8))
    with pytest.raises(ConfigError) as exc:
        _fork(alice, tiny_config, {"from_run": parent.pk, "from_step": 4})
    assert _error(exc) == ("config.init.from_step", f"run {parent.pk} has no checkpoint at update 4 (it has 6, 8)")
    empty = _parent(alice, tiny_config, steps=(), state=Run.State.FAILED)
    with pytest.raises(ConfigError) as exc:
        _fork(alice, tiny_config, {"from_run": empty.pk})
    assert _error(exc) == ("config.init.from_run", f"run {empty.pk} ended (failed) without a checkpoint to start from")


def test_a_running_parent_is_forked_from_a_step_it_will_write(alice, tiny_config):
    parent = _parent(alice, tiny_config, state=Run.State.RUNNING, steps=(2,))
    Run.objects.filter(pk=parent.pk).update(step=2)
    child = _fork(alice, tiny_config, {"from_run": parent.pk, "from_step": 6}).runs.get()
    assert child.parent_step == 6 and ckpt.read_pins(_dir(parent)) == {6: [f"run {child.pk}"]}
    with pytest.raises(ConfigError) as exc:  # every 2 updates, 2 updates a step: 2, 4, 6, 8
        _fork(alice, tiny_config, {"from_run": parent.pk, "from_step": 5})
    assert _error(exc) == (
        "config.init.from_step",
        f"run {parent.pk} writes checkpoints at updates 2, 4, 6, 8; 5 is not one of them",
    )
    Run.objects.filter(pk=parent.pk).update(step=6)
    with pytest.raises(ConfigError) as exc:  # passed, and not on disk: its clean-up removed it
        _fork(alice, tiny_config, {"from_run": parent.pk, "from_step": 4})
    assert _error(exc)[0] == "config.init.from_step" and "is past update 4" in _error(exc)[1]


def test_the_queue_holds_a_fork_until_its_parent_has_written_the_checkpoint(alice, tiny_config):
    parent = _parent(alice, tiny_config, state=Run.State.RUNNING, steps=())
    at_4 = _fork(alice, tiny_config, {"from_run": parent.pk, "from_step": 4}).runs.get()
    final = _fork(alice, tiny_config, {"from_run": parent.pk}).runs.get()
    assert final.parent_step is None
    assert runs_to_dispatch() == []
    reasons = waiting_reasons(list(Run.objects.filter(state="queued").select_related("experiment__project")))
    assert reasons[at_4.pk] == f"waiting for run {parent.pk} to reach update 4 (at 0)"
    assert reasons[final.pk] == f"waiting for run {parent.pk} to end (forked from its final checkpoint)"
    Run.objects.filter(pk=parent.pk).update(step=4)
    assert runs_to_dispatch() == []  # at update 4 the checkpoint may still be being written
    Run.objects.filter(pk=parent.pk).update(step=5)
    assert runs_to_dispatch() == [at_4.pk]
    run_transition(run=Run.objects.get(pk=parent.pk), to=Run.State.SUCCEEDED)
    assert sorted(runs_to_dispatch()) == [at_4.pk, final.pk]


def test_a_fork_keeps_its_parents_model(alice, tiny_config):
    parent = _parent(alice, tiny_config)
    other = {**tiny_config, "model": {"name": "tiny", "tiny_layers": 3}}
    with pytest.raises(ConfigError) as exc:
        _fork(alice, other, {"from_run": parent.pk})
    field, message = _error(exc)
    assert field == "config.model.tiny_layers" and "keeps its model" in message


def test_a_path_into_the_dashboards_run_folders_must_be_named_by_run(
    alice, tiny_config, runs_dir, tmp_path, monkeypatch
):
    parent = _parent(alice, tiny_config)
    with pytest.raises(ConfigError) as exc:
        _fork(alice, tiny_config, {"from_path": str(_dir(parent))})
    assert _error(exc) == (
        "init.from_path",
        "a run of this dashboard is named by init.from_run (its access is "
        "checked and its checkpoint kept), not by its folder",
    )
    monkeypatch.setenv("OPL_DATA_ROOTS", str(tmp_path / "cluster"))
    with pytest.raises(ConfigError) as exc:
        _fork(alice, tiny_config, {"from_run": parent.pk, "from_path": str(tmp_path / "cluster" / "ckpt")})
    assert _error(exc)[0] == "config.init.from_path"
    with pytest.raises(ConfigError) as exc:  # a cluster file outside the data roots
        _fork(alice, tiny_config, {"from_path": "/cluster/models/ckpt/step-00000010"})
    assert _error(exc)[0] == "init.from_path"
    outside = _fork(alice, tiny_config, {"from_path": str(tmp_path / "cluster" / "ckpt" / "step-00000010")}).runs.get()
    assert outside.parent_id is None  # a file under the data roots: no lineage to record


def test_a_sweep_forks_every_cell_from_one_checkpoint(alice, tiny_config):
    parent = _parent(alice, tiny_config)
    experiment = _fork(
        alice,
        tiny_config,
        {"from_run": parent.pk, "from_step": 6},
        sweep={"staleness.k": [0, 4], "algorithm.objective": ["grpo", "m2po"]},
        seeds=2,
    )
    runs = list(experiment.runs.order_by("id"))
    assert len(runs) == 8 and {(r.parent_id, r.parent_step) for r in runs} == {(parent.pk, 6)}
    assert sorted(ckpt.read_pins(_dir(parent))[6]) == sorted(f"run {r.pk}" for r in runs)


def test_the_api_takes_the_init_section_and_names_the_field_it_refuses(alice, charlie, api_client, tiny_config):
    parent = _parent(alice, tiny_config)
    body = {
        "name": "forked",
        "project": "lab",
        "config": {**tiny_config, "init": {"from_run": parent.pk, "from_step": 2, "optimizer": True}},
        "sweep": {"staleness.k": [0, 2]},
    }
    response = api_client(alice).post("/api/v1/experiments", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    run = api_client(alice).get(f"/api/v1/runs/{response.json()['runs'][0]}").json()
    assert (run["parent"], run["parent_step"], run["config"]["init"]["optimizer"]) == (parent.pk, 2, True)
    body["project"] = None
    refused = [{"field": "config.init.from_run", "message": f"run {parent.pk} does not exist or you cannot read it"}]
    for url in ("/api/v1/experiments", "/api/v1/experiments/preview"):
        response = api_client(charlie).post(url, data=json.dumps(body), content_type="application/json")
        assert (response.status_code, response.json()["errors"]) == (400, refused), url


def test_an_experiment_file_and_the_form_fork_every_cell(alice, client, tiny_config):
    parent = _parent(alice, tiny_config)
    spec = parse_experiment_yaml(f"""
name: staleness-from-warmup
project: lab
config:
  model: {{name: tiny}}
  rollout: {{group_size: 4, prompts_per_step: 4, max_new_tokens: 8}}
  algorithm: {{updates_per_step: 2}}
  train: {{steps: 4, device: cpu}}
  init: {{from_run: {parent.pk}, from_step: 4}}
sweep:
  staleness.k: [0, 2, 4]
""")
    from_file = experiment_create(owner=alice, **spec)
    assert [(r.parent_id, r.parent_step) for r in from_file.runs.all()] == [(parent.pk, 4)] * 3
    client.force_login(alice)
    form = flat_from_spec(
        {
            "name": "form-fork",
            "project": "lab",
            "config": {**tiny_config, "init": {"from_run": parent.pk, "from_step": 8}},
        }
    )
    form.update({"sweep-0-field": "staleness.k", "sweep-0-mode": "list", "sweep-0-values": "0, 4"})
    assert form["init.from_run"] == str(parent.pk)
    response = client.post("/experiments/new/", form)
    assert response.status_code == 302, response.content.decode()[-2000:]
    runs = Run.objects.filter(experiment__name="form-fork")
    assert [(r.parent_id, r.parent_step) for r in runs] == [(parent.pk, 8)] * 2


def test_the_form_shows_a_refused_fork_next_to_its_field(alice, charlie, client, tiny_config):
    parent = _parent(alice, tiny_config)
    client.force_login(charlie)
    form = flat_from_spec({"name": "sneaky", "config": {**tiny_config, "init": {"from_run": parent.pk}}})
    html = client.post("/experiments/new/", form).content.decode()
    assert f"run {parent.pk} does not exist or you cannot read it" in html
    assert 'id="err-init__from_run"' in html


def test_live_validation_checks_the_fork_as_the_user_types(alice, charlie, client, tiny_config):
    parent = _parent(alice, tiny_config, steps=(2, 4))
    client.force_login(alice)
    form = flat_from_spec(
        {"name": "f", "project": "lab", "config": {**tiny_config, "init": {"from_run": parent.pk, "from_step": 6}}}
    )
    html = client.post("/experiments/validate", form).content.decode()
    assert (
        'id="err-init__from_step" hx-swap-oob="true"><p class="error">'
        f"run {parent.pk} has no checkpoint at update 6 (it has 2, 4)" in html
    )
    form["init.from_step"] = "4"
    html = client.post("/experiments/validate", form).content.decode()
    assert 'id="err-init__from_step" hx-swap-oob="true"></div>' in html and ">1 run<" in html
    assert ckpt.read_pins(_dir(parent)) == {}  # validating pins nothing
    client.force_login(charlie)
    html = client.post("/experiments/validate", form).content.decode()
    assert f"run {parent.pk} does not exist or you cannot read it" in html


def test_a_step_the_running_parent_passed_and_cleaned_up_before_the_pin_is_refused(alice, tiny_config):
    # The dashboard's view of the parent lags (its progress arrives every few seconds): it says
    # update 2, but the trainer has already written 6 and, keeping 1, deleted 4.
    parent = _parent(alice, tiny_config, state=Run.State.RUNNING, steps=(6,))
    Run.objects.filter(pk=parent.pk).update(step=2)
    with pytest.raises(ConfigError) as exc:
        _fork(alice, tiny_config, {"from_run": parent.pk, "from_step": 4})
    field, message = _error(exc)
    assert field == "config.init.from_step" and "went past update 4" in message and "it has 6" in message
    assert not Run.objects.filter(parent=parent).exists()  # nothing created
    assert ckpt.read_pins(_dir(parent)) == {}  # and its pin taken back
    assert _fork(alice, tiny_config, {"from_run": parent.pk, "from_step": 8}).runs.get().parent_step == 8
