"""A launcher value is one argument and nothing more: text refuses the characters that make an
argument read differently from how it shows (a new line, a control character, U+202E), a `path`
parameter stays inside the run's folder, and a definition that hands its values to a shell's -c
is refused with the reason. Through the API and the job the backend gets, as a user's run goes."""

import json
import os

import pytest
from django.test import Client

from orchestrator.cluster.backends.base import BackendError
from orchestrator.cluster.jobspec import build_job_spec
from orchestrator.experiments.models import Run
from orchestrator.launchers.definition import DefinitionError, parse_definition, parse_params
from orchestrator.launchers.services import launcher_upsert

WRITER = {
    "name": "writer",
    "command": ["/bin/echo", "--note", "{note}", "--out", "{out}"],
    "parameters": {"note": {"type": "str", "default": "none"}, "out": {"type": "path", "default": "out/result.txt"}},
}


def refused(data) -> dict[str, str]:
    with pytest.raises(DefinitionError) as err:
        parse_definition(data)
    return {e["field"]: e["message"] for e in err.value.errors}


def post(client, url, body):
    return client.post(url, data=json.dumps(body), content_type="application/json")


@pytest.fixture
def api(alice, db):
    from django.contrib.auth.models import User

    launcher_upsert(by=User.objects.create_user("sam", is_staff=True), data=WRITER)
    client = Client()
    client.force_login(alice)
    return client


@pytest.mark.parametrize(
    "note,message",
    [
        ("two\nlines", "must be one line: it contains a line break (U+000A)"),
        ("a\rb", "must be one line: it contains a line break (U+000D)"),
        ("a\u2028b", "must be one line: it contains a line break (U+2028)"),
        ("tab\there", "must not contain the control character U+0009"),
        ("bell\x07", "must not contain the control character U+0007"),
        ("csi\x9b", "must not contain the control character U+009B"),
        ("txt.\u202egpj", "must not contain the bidirectional control U+202E: it shows the text in another order"),
        ("\u2066isolate\u2069", "must not contain the bidirectional control U+2066"),
    ],
)
def test_text_refuses_control_and_bidi_characters_naming_the_parameter(api, note, message):
    answer = post(api, "/api/v1/launchers/writer/runs", {"params": {"note": note}})
    assert answer.status_code == 400
    errors = {e["field"]: e["message"] for e in answer.json()["errors"]}
    assert errors["params.note"].startswith(message), errors
    assert not Run.objects.exists()


def test_ordinary_text_still_goes_through_verbatim(api):
    answer = post(api, "/api/v1/launchers/writer/runs", {"params": {"note": "a b; $(id) ü 日本 k=v"}})
    assert answer.status_code == 201, answer.content


@pytest.mark.parametrize(
    "out,message",
    [
        ("../../../../../../tmp/x", "leaves the run folder"),
        ("a/../../x", "leaves the run folder"),
        ("..", "leaves the run folder"),
        ("/tmp/x", "must be relative to the run folder"),
        ("out/%j.txt", "letters, digits and _ . / + - only"),
        ("out\nx", "must be one line"),
    ],
)
def test_a_path_parameter_cannot_leave_the_run_folder(api, out, message):
    answer = post(api, "/api/v1/launchers/writer/runs", {"params": {"out": out}})
    assert answer.status_code == 400
    errors = {e["field"]: e["message"] for e in answer.json()["errors"]}
    assert message in errors["params.out"], errors


def test_a_path_parameter_is_resolved_inside_the_run_folder(api, tmp_path):
    run_id = post(api, "/api/v1/launchers/writer/runs", {"params": {"out": "logs/../ckpt/last.pt"}}).json()["id"]
    run = Run.objects.get(pk=run_id)
    run.attempt = 1
    run_dir = tmp_path / "runs" / "7"
    spec = build_job_spec(run, "oplrun_secret", run_dir)
    assert spec.argv == ["/bin/echo", "--note", "none", "--out", str((run_dir / "ckpt" / "last.pt").resolve())]
    # a link inside the run folder that points out of it is refused when the job is made
    os.symlink("/etc", run_dir / "ckpt")
    with pytest.raises(BackendError, match=r"params.out: 'logs/../ckpt/last.pt' resolves to /etc/last.pt, outside"):
        build_job_spec(run, "oplrun_secret", run_dir)


@pytest.mark.parametrize(
    "command,at",
    [
        (["/bin/sh", "-c", "echo {s}"], 1),
        (["bash", "-c", "echo {s}"], 1),
        (["/usr/bin/dash", "-ec", "echo {s}"], 1),
        (["/bin/zsh", "-o", "errexit", "-lc", "echo {s}"], 3),
        (["/usr/bin/env", "LC_ALL=C", "bash", "-c", "echo {s}"], 3),
        (["{python}", "-c", "echo {s}"], 1),  # with python: /bin/bash
    ],
)
def test_a_shell_given_minus_c_is_refused_with_the_reason(command, at):
    data = {"name": "shelly", "python": "/bin/bash", "command": command, "parameters": {"s": {"type": "str"}}}
    found = refused(data)
    assert f"command[{at}]" in found, found
    assert "given" in found[f"command[{at}]"] and "runs its argument as shell code" in found[f"command[{at}]"]
    assert "one argument" in found[f"command[{at}]"]


def test_a_shell_running_a_script_file_with_the_values_as_arguments_is_fine():
    for command in (["/bin/bash", "/opt/train.sh", "-c", "{s}"], ["/bin/sh", "-e", "/opt/train.sh", "{s}"]):
        parse_definition({"name": "script", "command": command, "parameters": {"s": {"type": "str"}}})
    parse_definition({"name": "py", "command": ["/usr/bin/python3", "-c", "import sys"], "parameters": {}})


def test_text_joined_under_the_run_folder_must_be_a_path_parameter():
    found = refused({"name": "x", "command": ["/bin/echo", "{run_dir}/{s}"], "parameters": {"s": {"type": "str"}}})
    assert "make s a path parameter" in found["command[1]"]
    found = refused({"name": "x", "command": ["/bin/echo", "--o={run_dir}/{p}"], "parameters": {"p": {"type": "path"}}})
    assert "without {run_dir}" in found["command[1]"]
    literal = parse_definition(
        {"name": "x", "command": ["/bin/echo", "{{run_dir}}/{s}"], "parameters": {"s": {"type": "str"}}}
    )
    assert parse_params(literal, {"s": "a"}) == {"s": "a"}


def test_a_path_default_is_checked_with_the_definition():
    found = refused(
        {"name": "x", "command": ["/bin/echo", "{p}"], "parameters": {"p": {"type": "path", "default": "../x"}}}
    )
    assert "leaves the run folder" in found["parameters.p.default"]
