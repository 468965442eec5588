"""Paths in a run config are resolved where the trainer opens them, then checked (HIGH).

The job runs inside its run folder, so `init.from_path: "../run-1"` named a sibling run, another
user's private checkpoint, while the dashboard checked it against its own working directory. Every
path field (model.name unless it is a hub id, task.train_file, task.hf_dataset, init.from_path) is
now resolved against the job's folder to an absolute real path (symlinks and '..' followed), must
lie under OPL_DATA_ROOTS or in the folder of a run the caller may read, and is stored resolved;
the job is given its roots (OPL_PATH_ROOTS) and the trainer checks again before it looks at any
file. No answer tells an existing path from a missing one.
"""

import json
import os
from pathlib import Path

import pytest
import yaml

from orchestrator.cluster.jobspec import build_job_spec, run_dir_for
from orchestrator.experiments.runconfig import OUTSIDE, ConfigError
from orchestrator.experiments.services import experiment_create
from trainer import cli
from trainer.config import PATH_ROOTS_ENV, parse_config

pytestmark = pytest.mark.django_db


@pytest.fixture
def roots(settings, tmp_path, monkeypatch):
    """A data root holding train.jsonl and a model folder, and the runs folder beside it."""
    data = tmp_path / "data"
    (data / "models" / "m").mkdir(parents=True)
    (data / "train.jsonl").write_text('{"question": "1+1", "answer": "2"}\n')
    monkeypatch.setenv("OPL_DATA_ROOTS", str(data))
    settings.RUNS_DIR = tmp_path / "runs"
    return data.resolve()


@pytest.fixture
def charlies_run(charlie, tiny_config, roots):
    """Another user's private run with a checkpoint folder and a data file on disk."""
    run = experiment_create(owner=charlie, name="private", project="charlie-lab", config=tiny_config).runs.get()
    folder = run_dir_for(run) / "ckpt" / "step-00000008"
    folder.mkdir(parents=True)
    (folder / "state.pt").write_bytes(b"secret")
    (run_dir_for(run) / "data.jsonl").write_text('{"question": "q", "answer": "a"}\n')
    return run


def preview(api, config: dict) -> tuple[int, list]:
    response = api.post(
        "/api/v1/experiments/preview", data=json.dumps({"name": "x", "config": config}), content_type="application/json"
    )
    return response.status_code, response.json().get("errors", [])


def math(train_file: str) -> dict:
    return {"task": {"name": "math", "train_file": train_file, "eval_sets": []}}


@pytest.fixture
def api(alice, api_client):
    return api_client(alice)


def test_a_relative_from_path_names_the_sibling_run_and_is_refused(api, charlies_run):
    for path in (
        f"../run-{charlies_run.pk}",
        f"../run-{charlies_run.pk}/ckpt/step-00000008",
        f"/proc/self/cwd/../run-{charlies_run.pk}",
        str(run_dir_for(charlies_run)),
    ):
        status, errors = preview(api, {"init": {"from_path": path}})
        assert status == 400 and [e["field"] for e in errors] == ["config.init.from_path"], path
        assert "init.from_run" in errors[0]["message"] or errors[0]["message"] == OUTSIDE, path


def test_absolute_paths_outside_the_roots_get_one_answer_whether_or_not_they_exist(api, roots):
    answers = {
        path: preview(api, {"init": {"from_path": path}}) for path in ("/etc", "/nonexistent/ckpt", "/proc/self/cwd")
    }
    assert all(status == 400 for status, _ in answers.values())
    assert len({json.dumps(errors) for _, errors in answers.values()}) == 1
    assert answers["/etc"][1] == [{"field": "config.init.from_path", "message": OUTSIDE}]
    for path in ("/etc/hostname", "/nonexistent.jsonl", "../../../../../../etc/hostname"):
        assert preview(api, math(path)) == (400, [{"field": "config.task.train_file", "message": OUTSIDE}]), path


def test_a_model_name_that_is_not_a_hub_id_is_a_path(api, roots):
    for name in ("logs/../../../../etc", "a/b/c", "~/models", "/etc"):
        assert preview(api, {"model": {"name": name}})[1][0]["field"] == "config.model.name", name
    assert preview(api, {"model": {"name": "./m"}})[1][0]["message"].startswith(
        "a relative path is opened from the run's own folder"
    )
    for hub_id in ("Qwen/Qwen3-1.7B-Base", "gpt2", "smollm2-135m"):
        assert preview(api, {"model": {"name": hub_id}})[0] == 200, hub_id


def test_a_dataset_name_that_is_not_a_hub_id_is_a_path(api, roots):
    def dataset(name):
        return {"task": {"name": "math", "hf_dataset": name, "eval_sets": []}}

    for name in ("logs/../../../../etc", "a/b/c", "/etc", "../run-1"):
        assert preview(api, dataset(name))[1][0]["field"] == "config.task.hf_dataset", name
    for hub_id in ("openai/gsm8k", "gsm8k"):
        assert preview(api, dataset(hub_id))[0] == 200, hub_id


def test_paths_are_stored_resolved_and_symlinks_are_followed(alice, roots, charlies_run, tmp_path):
    (roots / "link").symlink_to(run_dir_for(charlies_run))
    (roots / "models" / "escape").symlink_to("/etc")
    run = experiment_create(
        owner=alice,
        name="ok",
        config={**math(str(roots / "models" / ".." / "train.jsonl")), "model": {"name": str(roots / "models" / "m")}},
    ).runs.get()
    assert run.config["task"]["train_file"] == str(roots / "train.jsonl")  # '..' resolved
    assert run.config["model"]["name"] == str(roots / "models" / "m")
    for config in (math(str(roots / "link" / "data.jsonl")), {"model": {"name": str(roots / "models" / "escape")}}):
        with pytest.raises(ConfigError) as exc:
            experiment_create(owner=alice, name="bad", config=config)
        assert exc.value.errors[0]["message"] == OUTSIDE


def test_a_file_in_a_run_folder_needs_read_access_to_that_run(
    alice, charlie, api, api_client, charlies_run, tiny_config
):
    own = experiment_create(owner=alice, name="mine", project="lab", config=tiny_config).runs.get()
    run_dir_for(own).mkdir(parents=True)
    (run_dir_for(own) / "data.jsonl").write_text('{"question": "q", "answer": "a"}\n')
    assert preview(api, math(f"../run-{own.pk}/data.jsonl"))[0] == 200
    theirs = preview(api, math(f"../run-{charlies_run.pk}/data.jsonl"))
    missing = preview(api, math("../run-99999999/data.jsonl"))
    assert theirs == missing == (400, [{"field": "config.task.train_file", "message": OUTSIDE}])
    assert preview(api_client(charlie), math(f"../run-{charlies_run.pk}/data.jsonl"))[0] == 200


def test_the_job_gets_its_roots_and_the_trainer_checks_them_before_any_file(
    alice, roots, tiny_config, tmp_path, monkeypatch, capsys
):
    parent = experiment_create(owner=alice, name="parent", project="lab", config=tiny_config).runs.get()
    ckpt = run_dir_for(parent) / "ckpt" / "step-00000008"
    ckpt.mkdir(parents=True)
    (ckpt / "state.pt").write_bytes(b"w")
    fork = experiment_create(
        owner=alice, name="fork", project="lab", config={**tiny_config, "init": {"from_run": parent.pk, "from_step": 8}}
    ).runs.get()
    spec = build_job_spec(fork, "token", run_dir_for(fork))
    job_roots = spec.env[PATH_ROOTS_ENV].split(os.pathsep)
    assert job_roots == [str(roots), str(run_dir_for(parent).resolve())]

    monkeypatch.setenv(PATH_ROOTS_ENV, spec.env[PATH_ROOTS_ENV])
    written = yaml.safe_load((run_dir_for(fork) / "config.yaml").read_text())
    assert parse_config(written).init.from_path == str(ckpt)  # the fork's parent: inside its roots
    answers = []
    for path in ("/etc/hostname", "/nonexistent.jsonl", str(run_dir_for(fork).parent / "run-999" / "x.jsonl")):
        config = tmp_path / "job.yaml"
        config.write_text(yaml.safe_dump({**written, **math(path), "init": {}}))
        assert cli.main(["check", "--config", str(config)]) == cli.EX_CONFIG
        answers.append(capsys.readouterr().err.replace(str(config), "CONFIG"))
    assert (
        len(set(answers)) == 1
        and f"task.train_file: outside the folders this job may read ({PATH_ROOTS_ENV})" in answers[0]
    )
    assert "no such file" not in answers[0]
    assert Path(written["init"]["from_path"]).is_absolute()
