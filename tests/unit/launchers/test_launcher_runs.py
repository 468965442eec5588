"""Launchers defined by staff (service, admin, YAML file) and runs created from them (API and form),
down to the job the backend gets."""

import json
from pathlib import Path

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command
from django.test import Client

from orchestrator.cluster.backends.base import BackendError
from orchestrator.cluster.jobspec import build_job_spec
from orchestrator.experiments.models import Run
from orchestrator.launchers.definition import DefinitionError
from orchestrator.launchers.models import Launcher
from orchestrator.launchers.services import launcher_upsert
from tests.unit.launchers.helpers import EXAMPLE_YAML, SCRIPT, tiny_sdk


@pytest.fixture
def staff(db) -> User:
    return User.objects.create_user("sam", password="sam-pass-123", is_staff=True)


@pytest.fixture
def launcher(staff) -> Launcher:
    return launcher_upsert(by=staff, data=tiny_sdk())[0]


def post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


def test_only_staff_define_launchers(alice, staff):
    with pytest.raises(PermissionDenied, match="only staff"):
        launcher_upsert(by=alice, data=tiny_sdk())
    launcher, created = launcher_upsert(by=staff, data=tiny_sdk())
    assert created and launcher.created_by == staff
    again, created = launcher_upsert(by=staff, data=tiny_sdk(description="changed"))
    assert not created and again.pk == launcher.pk and again.description == "changed"
    with pytest.raises(DefinitionError) as err:
        launcher_upsert(by=staff, data=tiny_sdk(command=["{python}", "{nope}"]))
    assert err.value.errors[0]["field"] == "command[1]"


def test_the_admin_is_for_staff_and_names_the_bad_field(alice, staff):
    staff.is_superuser = True
    staff.save()
    client = Client()
    client.force_login(alice)
    assert client.get("/admin/launchers/launcher/add/").status_code == 302  # to the admin's login
    client.force_login(staff)
    form = {
        "name": "echo",
        "description": "",
        "enabled": "on",
        "python": "",
        "container": "",
        "command": json.dumps(["/bin/echo", "{what}"]),
        "parameters": json.dumps([{"name": "what", "type": "str", "default": "hi"}]),
        "resources": json.dumps({"gpus": 0}),
    }
    bad = client.post("/admin/launchers/launcher/add/", {**form, "resources": json.dumps({"gpus": -1})})
    assert bad.status_code == 200
    assert "resources.gpus: Input should be greater than or equal to 0" in bad.content.decode()
    assert client.post("/admin/launchers/launcher/add/", form).status_code == 302
    assert Launcher.objects.get(name="echo").created_by == staff


def test_launchers_load_from_a_yaml_file_and_a_bad_one_changes_nothing(tmp_path, staff):
    call_command("load_launchers", str(EXAMPLE_YAML), "--user", "sam")
    assert Launcher.objects.get(name="tiny-sdk").created_by == staff
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump([tiny_sdk(name="fine"), tiny_sdk(name="broken", resources={"nodes": 0})]))
    with pytest.raises(CommandError, match=r"launcher broken: resources.nodes: Input should be greater"):
        call_command("load_launchers", str(bad))
    assert not Launcher.objects.filter(name="fine").exists()
    with pytest.raises(CommandError, match="--user: 'alice' is not a staff user"):
        User.objects.create_user("alice")
        call_command("load_launchers", str(EXAMPLE_YAML), "--user", "alice")


def test_the_api_lists_launchers_and_creates_a_queued_run(api_client, alice, launcher):
    api = api_client(alice)
    listed = api.get("/api/v1/launchers").json()["launchers"]
    assert [entry["name"] for entry in listed] == ["tiny-sdk"]
    assert [p["name"] for p in listed[0]["parameters"]] == ["steps", "lr", "sleep", "note"]
    assert listed[0]["parameters"][0] == {
        "name": "steps",
        "type": "int",
        "default": 5,
        "min": 1.0,
        "max": 100000.0,
        "help": "training steps",
    }
    response = post(api, "/api/v1/launchers/tiny-sdk/runs", {"params": {"steps": 3, "lr": "0.5"}, "project": "lab"})
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    assert (run.state, run.owner, run.experiment.project.name, run.gpus) == ("queued", alice, "lab", 0)
    assert run.config == {
        "launcher": {
            "name": "tiny-sdk",
            "params": {"steps": 3, "lr": 0.5, "sleep": 0.2, "note": "none"},
            "resources": {"gpus": 0, "cpus": 1, "mem_gb": 1.0, "nodes": 1, "time_limit_min": 60},
        }
    }
    # the run's pages and the runs list show it like any other run
    client = Client()
    client.force_login(alice)
    assert client.get(f"/runs/{run.pk}/").status_code == 200
    assert client.get("/").status_code == 200
    assert api.get(f"/api/v1/runs/{run.pk}").json()["config"]["launcher"]["name"] == "tiny-sdk"


def test_the_api_names_each_bad_value(api_client, alice, charlie, launcher):
    api = api_client(alice)
    bad = post(api, "/api/v1/launchers/tiny-sdk/runs", {"params": {"steps": 0, "lr": "x", "bogus": 1}})
    assert bad.status_code == 400
    assert {e["field"]: e["message"] for e in bad.json()["errors"]} == {
        "params.bogus": "tiny-sdk has no such parameter (it has: steps, lr, sleep, note)",
        "params.steps": "must be at least 1, got 0",
        "params.lr": "must be a number, got 'x'",
    }
    assert post(api, "/api/v1/launchers/nope/runs", {}).status_code == 404
    Launcher.objects.filter(pk=launcher.pk).update(enabled=False)
    gone = post(api, "/api/v1/launchers/tiny-sdk/runs", {})
    assert gone.status_code == 404 and "no enabled launcher named 'tiny-sdk'" in gone.json()["errors"][0]["message"]
    assert api.get("/api/v1/launchers").json()["launchers"] == []
    Launcher.objects.filter(pk=launcher.pk).update(enabled=True)
    # another team's project: as if it did not exist
    post(api_client(charlie), "/api/v1/launchers/tiny-sdk/runs", {"project": "theirs"})
    refused = post(api, "/api/v1/launchers/tiny-sdk/runs", {"project": "theirs"})
    assert refused.status_code == 404 and refused.json()["errors"][0]["field"] == "project"
    assert Run.objects.filter(owner=alice).count() == 0


def test_the_form_queues_a_run_and_shows_errors_by_field(alice, launcher):
    client = Client()
    client.force_login(alice)
    assert 'href="/launchers/"' in client.get("/experiments/new/").content.decode()
    assert "/launchers/tiny-sdk/run" in client.get("/launchers/").content.decode()
    page = client.get("/launchers/tiny-sdk/run").content.decode()
    assert 'name="param-steps"' in page and 'value="5"' in page and "training steps" in page
    bad = client.post("/launchers/tiny-sdk/run", {"param-steps": "many", "param-lr": "-1", "name": "a b"})
    assert bad.status_code == 400
    text = bad.content.decode()
    assert "must be a whole number, got &#x27;many&#x27;" in text and "must be at least 0, got -1.0" in text
    ok = client.post("/launchers/tiny-sdk/run", {"param-steps": "7", "param-note": "hello world", "name": "mine"})
    run = Run.objects.get(owner=alice)
    assert ok.status_code == 302 and ok["Location"] == f"/runs/{run.pk}/"
    assert run.name == "mine" and run.config["launcher"]["params"]["steps"] == 7
    assert run.config["launcher"]["params"]["note"] == "hello world"
    assert client.get("/launchers/nope/run").status_code == 404


def test_the_job_runs_the_launchers_command_with_the_sdks_environment(alice, launcher, settings, tmp_path):
    settings.PUBLIC_URL = "http://dash.example:8000"
    settings.TRAINER_PYTHON = "/venv/bin/python"
    api = Client()
    api.force_login(alice)
    run_id = post(api, "/api/v1/launchers/tiny-sdk/runs", {"params": {"steps": 2, "note": "a b"}}).json()["id"]
    run = Run.objects.get(pk=run_id)
    run.attempt = 1
    spec = build_job_spec(run, "oplrun_secret", tmp_path / "run")
    assert spec.argv == [
        "/venv/bin/python",
        "-u",
        str(SCRIPT),
        "--steps",
        "2",
        "--lr=0.1",
        "--sleep",
        "0.2",
        "--note",
        "a b",
    ]
    assert Path(spec.argv[2]).is_file()  # the shipped example's script, from a fresh clone: no /opt/opl
    assert spec.env["OPL_URL"] == "http://dash.example:8000" and spec.env["OPL_TOKEN"] == "oplrun_secret"
    assert spec.env["OPL_RUN_ID"] == str(run.pk) and spec.env["OPL_RUN_TOKEN"] == "oplrun_secret"
    assert (spec.cpus, spec.gpus, spec.mem_gb, spec.nodes, spec.time_limit_min) == (1, 0, 1.0, 1, 60)
    # the command is the launcher's as it stands at submission: a disabled one is refused
    Launcher.objects.filter(pk=launcher.pk).update(enabled=False)
    with pytest.raises(BackendError, match="'tiny-sdk' is disabled") as err:
        build_job_spec(run, "oplrun_secret", tmp_path / "run")
    assert err.value.permanent
    changed = tiny_sdk()
    changed["parameters"]["steps"].update(max=1, default=1)
    launcher_upsert(by=None, data=changed)
    with pytest.raises(BackendError, match="changed since this run was queued: params.steps: must be at most 1"):
        build_job_spec(run, "oplrun_secret", tmp_path / "run")
    assert not Path(tmp_path / "run" / "config.yaml").exists()  # no trainer config for a launcher run


def test_a_launcher_section_cannot_come_in_through_an_experiment(api_client, alice, launcher, tiny_config):
    """Only launcher_run_create writes config.launcher: the experiment API refuses the section, so
    no user-written config can make a job of a launcher's command with values it never checked."""
    body = {"name": "sneaky", "config": {**tiny_config, "launcher": {"name": "tiny-sdk", "params": {"note": "-x"}}}}
    response = post(api_client(alice), "/api/v1/experiments", body)
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["config.launcher"]
    assert not Run.objects.exists()


def test_the_form_and_the_session_api_need_the_csrf_token(alice, launcher):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post("/launchers/tiny-sdk/run", {"param-steps": "3"}).status_code == 403
    refused = post(client, "/api/v1/launchers/tiny-sdk/runs", {"params": {}})
    assert refused.status_code == 403 and refused.json()["error"] == "CSRF check failed"
    assert not Run.objects.exists()


def test_the_form_offers_the_project_the_user_works_in(alice, launcher, tiny_config):
    """The demo user's launcher run landed in an auto-created personal project ("demo-1") next to
    the demo's own: the form starts on the project of the user's newest experiment."""
    from orchestrator.experiments.services import experiment_create

    client = Client()
    client.force_login(alice)
    assert 'name="project" value=""' in client.get("/launchers/tiny-sdk/run").content.decode()  # nothing yet
    experiment_create(owner=alice, name="demo", project="demo", config=tiny_config)
    page = client.get("/launchers/tiny-sdk/run").content.decode()
    assert 'name="project" value="demo"' in page
    client.post("/launchers/tiny-sdk/run", {"param-steps": "2", "name": "mine", "project": "demo"})
    assert Run.objects.get(name="mine").experiment.project.name == "demo"
