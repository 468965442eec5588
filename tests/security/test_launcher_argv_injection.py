"""The sentinel-injection test (tests/unit/cluster/test_slurm_jobscript.py's NASTY values and its
/tmp/opl-pwned sentinel) extended to launcher parameters: values a user types into a launcher's
form or API reach the program as the argv entries the launcher's command puts them in, through the
Slurm job script (run by bash, as slurmd would) and through the local backend's subprocess, and
no shell ever acts on them: the sentinel files are never created."""

import json
import os
import subprocess
import time

import pytest
from django.contrib.auth.models import User

from orchestrator.cluster.backends.base import JobState
from orchestrator.cluster.backends.local import LocalBackend
from orchestrator.cluster.jobspec import build_job_spec
from orchestrator.cluster.slurm.jobscript import SlurmProfile, build_request
from orchestrator.experiments.models import Run
from orchestrator.launchers.services import launcher_upsert
from tests.unit.cluster.test_slurm_jobscript import NASTY

PROBE = "import json, sys; print(json.dumps(sys.argv[1:]))"


def hostile(sentinel: str) -> list[str]:
    """Each value a shell would act on, each aimed at creating the sentinel file, that a text
    parameter takes (a new line or another control character is refused at the form and API: see
    test_values_with_a_line_break_are_refused_before_any_job)."""
    return [v for v in NASTY if "\n" not in v] + [
        f"$(touch {sentinel})",
        f"`touch {sentinel}`",
        f"x; touch {sentinel}",
        f"x && touch {sentinel}",
        f"x | touch {sentinel}",
        f"x' ; touch {sentinel} ; '",
        f'x" ; touch {sentinel} ; "',
        "${IFS}touch${IFS}" + sentinel,
        "{a}",  # looks like a placeholder: stays as typed
        "%j %x",  # Slurm's filename patterns
    ]


@pytest.fixture
def launcher(db):
    staff = User.objects.create_user("sam", is_staff=True)
    definition = {
        "name": "probe",
        "command": ["{python}", "-c", PROBE, "{a}", "--b={a}", "x{a}y"],
        "parameters": {"a": {"type": "str", "default": "x"}},
    }
    return launcher_upsert(by=staff, data=definition)[0]


def queued_run(api_client, user, value: str) -> Run:
    response = api_client(user).post(
        "/api/v1/launchers/probe/runs", data=json.dumps({"params": {"a": value}}), content_type="application/json"
    )
    assert response.status_code == 201, response.content
    run = Run.objects.get(pk=response.json()["id"])
    run.attempt = 1
    return run


def test_launcher_parameters_reach_the_program_verbatim_through_slurms_script(launcher, alice, api_client, tmp_path):
    sentinel = tmp_path / "pwned-slurm"
    for i, value in enumerate(hostile(str(sentinel))):
        run_dir = tmp_path / f"run-{i}"
        spec = build_job_spec(queued_run(api_client, alice, value), "oplrun_token", run_dir)
        request = build_request(spec, SlurmProfile())
        script = tmp_path / "job.sh"
        script.write_text(request.script)
        out = subprocess.run(["bash", str(script)], env=request.environment, capture_output=True, text=True, check=True)
        assert json.loads(out.stdout) == [value, f"--b={value}", f"x{value}y"], value
        if value.strip():
            assert value not in request.script  # nothing a user typed is in the shell text
    assert not sentinel.exists() and not os.path.exists("/tmp/opl-pwned")


def test_launcher_parameters_reach_the_program_verbatim_through_the_local_backend(
    launcher, alice, api_client, tmp_path, settings
):
    settings.LOCAL_JOBS_DIR = tmp_path / "jobs"
    backend = LocalBackend()
    sentinel = tmp_path / "pwned-local"
    values = hostile(str(sentinel))
    specs = [
        build_job_spec(queued_run(api_client, alice, value), "oplrun_token", tmp_path / f"run-{i}")
        for i, value in enumerate(values)
    ]
    for spec in specs:
        backend.submit(spec)
    deadline = time.monotonic() + 120
    for spec, value in zip(specs, values, strict=True):
        while (status := backend.statuses([spec.name]).get(spec.name)) is None or not status.state.is_terminal:
            assert time.monotonic() < deadline, f"job {spec.name} did not end"
            time.sleep(0.1)
        assert status.state is JobState.SUCCEEDED, backend.log_paths(spec.run_dir, 1)["stderr"].read_text()
        out = backend.log_paths(spec.run_dir, 1)["stdout"].read_text()
        assert json.loads(out) == [value, f"--b={value}", f"x{value}y"], value
    assert not sentinel.exists() and not os.path.exists("/tmp/opl-pwned")


def test_values_with_a_line_break_are_refused_before_any_job(launcher, alice, api_client, tmp_path):
    for value in [*(v for v in NASTY if "\n" in v), f"x\ntouch {tmp_path / 'pwned'}"]:
        response = api_client(alice).post(
            "/api/v1/launchers/probe/runs", data=json.dumps({"params": {"a": value}}), content_type="application/json"
        )
        assert response.status_code == 400, value
        assert response.json()["errors"][0]["field"] == "params.a"
    assert not Run.objects.exists()
