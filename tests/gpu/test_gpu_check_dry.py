"""The GPU check's CPU dry run: scripts/gpu-check.sh end to end, as a CUDA node would run it,
with the GPU swapped for the CPU (GPU_CHECK_DRY=cpu). Not marked gpu: `make test` runs it, so the
next change that breaks the script is caught here, not on a GPU node.

What stands in for the machine (no GPU here, so this is a stand-in by necessity):
- its python3, a venv (/opt/torch/.venv there) with other transformers and tokenizers than the
  project's pins, a subset of the machine's packages and none it lacks (standin-requirements.txt);
  torch is the project's CPU build, linked in from .venv rather than copied (about 1 GB). A venv
  made from this one would not see that torch, as it would not see the machine's;
- the machine's offline install: the wheels are fetched for the stand-in's Python (3.11 here, 3.12
  there) and installed with pip --no-index into a --target folder;
- the device: OPL_GPU_TEST_DEVICE=cpu for the gpu tests, benchmarks/gpu_check.py --tiny, and the
  GPU study preset under scripts/gpu_check/study-cpu-override.yaml (the CPU study preset only where
  the GPU one is missing).
The stand-in and the wheels are cached in GPU_CHECK_CACHE (default ~/.cache/opl-gpu-check), kept
between clones, so only a machine's first run needs PyPI and builds the stand-in.
"""

import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STANDIN_REQUIREMENTS = Path(__file__).with_name("standin-requirements.txt")
GPU_STUDY_PRESET = REPO / "examples/presets/gpu-study-smollm2.yaml"
CPU_STUDY_PRESET = REPO / "examples/presets/cpu-staleness-study.yaml"
OUT_FILES = {
    "gpu-check.log",
    "junit.xml",
    "gpu-figures.json",
    "nvidia-smi-before.txt",
    "nvidia-smi-after.txt",
    "study-runs.tar.gz",
}
BUNDLE_BUDGET_MIB = 48


def cache_root() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "opl-gpu-check"
    return Path(os.environ.get("GPU_CHECK_CACHE", default))


def clean_env(**extra: str) -> dict:
    """This machine's environment less what would make the stand-in see the project's venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, "GPU_CHECK_CACHE": str(cache_root()), **extra}


def standin_python() -> Path:
    """The stand-in's python3, built once per requirements and torch (about 1-2 minutes, from PyPI)."""
    torch_dist = importlib.metadata.distribution("torch")
    key = hashlib.sha256(
        (STANDIN_REQUIREMENTS.read_text() + torch_dist.version + sys._base_executable).encode()
    ).hexdigest()[:12]
    root = cache_root() / f"standin-{key}"
    python = root / "bin" / "python3"
    if (root / ".ready").exists():
        return python
    subprocess.run(["rm", "-rf", str(root)], check=True)
    subprocess.run(
        [sys._base_executable, "-m", "venv", str(root)], check=True, timeout=120
    )  # a venv, as on the machine
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "-r", str(STANDIN_REQUIREMENTS)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.fail(
            "could not build the GPU machine's stand-in from PyPI (is it reachable from here?):\n"
            + "\n".join(done.stderr.strip().splitlines()[-15:])
        )
    site = Path(
        subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    ours = Path(torch_dist.locate_file(""))
    info = next(ours.glob(f"torch-{torch_dist.version}.dist-info"))
    for name in [*torch_dist.read_text("top_level.txt").split(), info.name]:
        (site / name).symlink_to(ours / name)
    (root / ".ready").write_text("")
    return python


def test_the_gpu_check_runs_end_to_end_on_a_stand_in_of_the_gpu_machine(tmp_path):
    python = standin_python()
    version = subprocess.check_output(
        [str(python), "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"], text=True
    ).strip()
    standin_torch = subprocess.check_output(
        [str(python), "-c", "import torch; print(torch.__version__)"], text=True
    ).strip()
    preset = GPU_STUDY_PRESET if GPU_STUDY_PRESET.exists() else CPU_STUDY_PRESET
    wheels, out = tmp_path / "wheels", tmp_path / "out"

    # Here: the wheels the machine lacks, for its Python, and the study plan (with the CPU override).
    fetch = subprocess.run(
        ["bash", "scripts/gpu-check.sh", "--fetch-wheels", str(wheels)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(GPU_PYTHON_VERSION=version, GPU_CHECK_DRY="cpu", GPU_CHECK_STUDY_PRESET=str(preset)),
    )
    print(fetch.stdout, fetch.stderr)
    assert fetch.returncode == 0, fetch.stdout[-3000:] + fetch.stderr[-3000:]
    size = re.search(r"bundle size: tree ([\d.]+) MiB \+ wheels ([\d.]+) MiB = ([\d.]+) MiB", fetch.stdout)
    assert size and float(size[3]) < BUNDLE_BUDGET_MIB, fetch.stdout

    # There: the machine's python3 first on PATH, no network needed, everything under $OUT.
    env = clean_env(
        PATH=f"{python.parent}{os.pathsep}{os.environ['PATH']}",
        OUT=str(out),
        GPU_CHECK_DRY="cpu",
        GPU_CHECK_STUDY_PRESET=str(preset),
    )
    run = subprocess.run(
        ["bash", "scripts/gpu-check.sh", "--study", str(wheels)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=420,
        env=env,
    )
    print(run.stdout[-8000:], run.stderr[-2000:])
    last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert last.startswith("gpu-check summary: preflight=0 install=0 tests=0 benchmark=0 study=0 "), run.stdout[-4000:]
    assert run.returncode == 0
    assert (out / "gpu-check.log").read_text().strip().splitlines()[-1] == last  # the log is the whole output, tee'd

    assert {p.name for p in out.iterdir()} == OUT_FILES  # within the 8 files that come back
    assert all(p.stat().st_size < 16 << 20 for p in out.iterdir())
    figures = json.loads((out / "gpu-figures.json").read_text())
    env_seen = figures["environment"]
    assert env_seen["venv_over"] and env_seen["torch"] == standin_torch
    assert env_seen["transformers"] == "5.17.0"  # the machine's own, not the project's pin
    installed = {row["name"] for row in figures["install"]["installed"]}
    assert {"pydantic", "pydantic-core", "math-verify", "latex2sympy2-extended", "antlr4-python3-runtime"} <= installed
    assert "opl-client" in installed  # the trainer's reporting, built from client/ into the bundle
    assert not installed & {"torch", "transformers", "tokenizers", "numpy", "pytest"}
    assert figures["tests"]["passed"] == 2 and figures["tests"]["failed"] == 0

    phases = figures["phases"]  # each phase, cut at its timeout (+5 s to kill), would still end inside the budget
    assert all(p["start_s"] + p["timeout"] + 5 <= figures["budget_s"] for p in phases.values()), phases
    per_test = int(re.search(r"--timeout (\d+)", phases["tests"]["note"])[1])
    assert per_test < phases["tests"]["timeout"]
    log = (out / "gpu-check.log").read_text()
    assert f"timeout: {per_test}.0s" in log  # pytest-timeout loaded with -p ...
    assert "plugins:" not in log  # ... and none of the stand-in's own (xdist, mock, anyio) autoloaded
    bench = figures["benchmark"]
    assert bench["train_tokens_per_s"]["grpo"] > 0 and bench["train_tokens_per_s"]["m2po"] > 0
    assert bench["generate"]["tokens_per_s"] > 0
    study = figures["study"]
    if "warmup_run" in preset.read_text():  # the GPU preset has none (the instruct model is the peaked start)
        assert study["warmup"]["status"] == "done"
    else:
        assert "warmup" not in study
    assert study["done"] == study["planned"] == 2, study  # GPU_CHECK_STUDY_MAX_RUNS' default in the dry run
