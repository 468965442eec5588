"""Job script rendering: strict names and paths, everything else through the environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.cluster.backends.base import JobSpec
from orchestrator.cluster.slurm.jobscript import SlurmProfile, UnsafeValue, build_request, render_script

GOLDEN = Path(__file__).parent / "golden" / "slurm_job_script.sh"
NASTY = ["a b", "$(touch /tmp/opl-pwned)", "`id`", "x; rm -rf /", "'\"", "$HOME", "*", "line\nbreak", ""]


def spec(tmp_path: Path, **kw) -> JobSpec:
    return JobSpec(
        run_id=42,
        attempt=3,
        run_dir=kw.pop("run_dir", tmp_path / "run-42"),
        argv=kw.pop("argv", ["/usr/bin/python3", "-m", "trainer", "run"]),
        **kw,
    )


def test_golden_job_script():
    profile = SlurmProfile(
        name="a100", partition="gpu", setup_lines=["module load cuda/12.4", "source /opt/conda/bin/activate rl"]
    )
    assert render_script(profile, 42, 3) == GOLDEN.read_text()


@pytest.mark.parametrize("field", ["partition", "account", "qos", "gpu_type"])
@pytest.mark.parametrize("value", ["gpu;reboot", "$(id)", "a b", "gpu`x`", "a|b", "a>b", "-x", "a&b", "gpu\n"])
def test_shell_metacharacters_in_profile_names_are_refused_naming_the_field(field, value):
    with pytest.raises(ValidationError) as err:
        SlurmProfile(**{field: value})
    assert f"{field}:" in str(err.value)


@pytest.mark.parametrize("value", ["relative/dir", "/a/../etc", "/a b", "/x;y", "/tmp/$HOME", "/out-%j"])
def test_unsafe_paths_are_refused_naming_the_field(tmp_path, value):
    with pytest.raises(UnsafeValue) as err:
        build_request(spec(tmp_path, run_dir=Path(value)), SlurmProfile())
    assert err.value.field == "run_dir"
    with pytest.raises(ValidationError, match="container:"):
        SlurmProfile(container=value)


def test_bad_environment_names_are_refused(tmp_path):
    with pytest.raises(UnsafeValue, match=r"env\['A B'\]"):
        build_request(spec(tmp_path, env={"A B": "x"}), SlurmProfile())
    with pytest.raises(UnsafeValue, match=r"env\['A\\n'\]"):  # Python's $ would match before the newline
        build_request(spec(tmp_path, env={"A\n": "x"}), SlurmProfile())


def test_request_carries_ids_profile_and_resources(tmp_path):
    req = build_request(
        spec(tmp_path, gpus=2, cpus=4, mem_gb=8, time_limit_min=30),
        SlurmProfile(partition="gpu", account="rl", qos="high", gpu_type="a100"),
    )
    assert req.name == "opl-42-a3" and req.comment == "opl run=42 attempt=3"
    assert (req.partition, req.account, req.qos, req.gpus, req.gpu_type) == ("gpu", "rl", "high", 2, "a100")
    assert (req.cpus_per_task, req.memory_mb, req.time_limit_min) == (4, 8192, 30)
    assert req.standard_output == f"{tmp_path}/run-42/logs/attempt-3.out"
    assert req.requeue is False
    # the profile's own sizes win over the run's
    req = build_request(spec(tmp_path, gpus=2), SlurmProfile(gpus=1, time_limit_min=5))
    assert (req.gpus, req.time_limit_min) == (1, 5)


def test_nasty_arguments_and_env_values_reach_the_program_verbatim(tmp_path):
    """Run the rendered script with bash, as slurmd would, with the job environment only."""
    run_dir = tmp_path / "run-42"
    run_dir.mkdir()
    probe = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ['OPL_NASTY'], os.getcwd()]))"
    req = build_request(
        spec(
            tmp_path,
            run_dir=run_dir,
            argv=[sys.executable, "-c", probe, *NASTY],
            env={"OPL_NASTY": "$(touch /tmp/opl-pwned)`id`;'"},
        ),
        SlurmProfile(),
    )
    script = tmp_path / "job.sh"
    script.write_text(req.script)
    out = subprocess.run(["bash", str(script)], env=req.environment, capture_output=True, text=True, check=True)
    import json

    argv, nasty_env, cwd = json.loads(out.stdout)
    assert argv == NASTY
    assert nasty_env == "$(touch /tmp/opl-pwned)`id`;'"
    assert cwd == str(run_dir)
    assert not os.path.exists("/tmp/opl-pwned")
    for value in NASTY[1:]:
        if value:
            assert value not in req.script  # nothing user-supplied is in the shell text
