"""On the GPU machine: install, offline, only the bundle's wheels that its python3 lacks.

    python3 scripts/gpu_check/install.py BUNDLE SITE REPORT.json

No virtualenv: a venv made from the machine's python3 (itself a venv) would not see its torch.
Wheels go to SITE with `pip install --no-index --no-deps --target`, and the caller puts SITE on
PYTHONPATH. A wheel is installed when its package is missing here, when the version here falls
short of what another installed wheel needs, or when it is this repository's own (the client).
Then a fresh interpreter imports what the trainer and its tests need. Every requirement that is not
met is named; the exit code is 1 if any is not.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

from packaging.markers import default_environment
from packaging.version import Version
from wheels import OURS, REPO, Wheel, canonical, needed_pins, pin_name, read_wheel

# What the gpu tests, the benchmark and the trainer CLI import (lazy imports included).
IMPORTS = (
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "numpy",
    "pydantic",
    "yaml",
    "httpx",
    "psutil",
    "math_verify",
    "pytest",
    "pytest_timeout",
    "trainer.config",
    "trainer.loop",
    "trainer.rollout.rewards",
    "trainer.rollout.batch",
    "trainer.algo.objectives",
    "opl_client.pusher",
)
VERSIONS = ("torch", "transformers", "tokenizers", "numpy", "pydantic", "pytest")


def installed_here() -> dict[str, str]:
    return {canonical(d.metadata["Name"]): d.version for d in importlib.metadata.distributions() if d.metadata["Name"]}


def select(wheels: list[Wheel], here: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """{wheel name: why it is installed}, and the requirements that nothing here or in the bundle meets."""
    env = default_environment()
    by_name = {w.name: w for w in wheels}
    chosen = {w.name: "missing here" for w in wheels if w.name not in here}
    chosen.update({w.name: "this repository's own" for w in wheels if w.name in OURS})
    problems: list[str] = []
    changed = True
    while changed:
        changed = False
        for name in list(chosen):
            for req in by_name[name].needs(env):
                dep = canonical(req.name)
                have = by_name[dep].version if dep in chosen else here.get(dep)
                if have is not None and req.specifier.contains(Version(have), prereleases=True):
                    continue
                bundled = by_name.get(dep)
                if dep not in chosen and bundled and req.specifier.contains(Version(bundled.version), prereleases=True):
                    chosen[dep] = f"{name} needs {req}; here: {have or 'none'}"
                    changed = True
                    continue
                problem = (
                    f"{name} {by_name[name].version} needs {req}; here: {have or 'none'}, "
                    f"bundle: {bundled.version if bundled else 'none'}"
                )
                if problem not in problems:
                    problems.append(problem)
    return chosen, problems


def pip_install(files: list[Path], site: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no index, find-links or constraints from a pip.conf: only these files
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--target",
            str(site),
            *map(str, files),
        ],
        env=env,
        capture_output=True,
        text=True,
    )


def check_imports(site: Path) -> tuple[dict[str, str], str]:
    """Import what the check needs in a fresh interpreter with SITE on the path: (versions, error)."""
    code = (
        "import importlib, json\n"
        f"for m in {IMPORTS!r}: importlib.import_module(m)\n"
        "from importlib.metadata import version\n"
        f"print(json.dumps({{n: version(n) for n in {VERSIONS!r}}}))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(site)])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        return {}, "\n".join(done.stderr.strip().splitlines()[-6:])
    return json.loads(done.stdout.strip().splitlines()[-1]), ""


def main() -> int:
    bundle, site, report_path = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    report: dict = {"installed": [], "kept": [], "problems": [], "pins": []}

    def finish() -> int:
        report_path.write_text(json.dumps(report, indent=1))
        for problem in report["problems"]:
            print(f"install: PROBLEM {problem}")
        return 1 if report["problems"] else 0

    manifest_path = bundle / "manifest.json"
    if not manifest_path.exists():
        report["problems"].append(
            f"{manifest_path}: no manifest; fill the folder with scripts/gpu-check.sh --fetch-wheels {bundle}"
        )
        return finish()
    manifest = json.loads(manifest_path.read_text())
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest["python_version"] != ours:
        report["problems"].append(
            f"the wheels in {bundle} are for Python {manifest['python_version']}, this python3 is {ours} "
            f"({sys.executable}): fetch them again with GPU_PYTHON_VERSION={ours} scripts/gpu-check.sh --fetch-wheels"
        )
        return finish()

    here = installed_here()
    wheels = [read_wheel(p) for p in sorted(bundle.glob("*.whl"))]
    chosen, problems = select(wheels, here)
    report["problems"] += problems
    for pin in needed_pins():
        name, pinned = pin_name(pin), pin.split("==", 1)[1]
        bundled = next((w.version for w in wheels if w.name == name and name in chosen), None)
        have = bundled or here.get(name)
        report["pins"].append(
            {"name": name, "pinned": pinned, "here": have, "from": "bundle" if bundled else "machine"}
        )
        if have is None:
            report["problems"].append(f"the trainer needs {pin}: neither this machine nor the bundle has {name}")
    for w in wheels:
        if w.name in chosen:
            report["installed"].append({"name": w.name, "version": w.version, "why": chosen[w.name]})
        else:
            report["kept"].append({"name": w.name, "bundle": w.version, "here": here[w.name]})
    print(
        f"install: python3 {sys.version.split()[0]} at {sys.executable} "
        f"({'a venv over ' + sys.base_prefix if sys.prefix != sys.base_prefix else 'not a venv'})"
    )
    print(
        "install: what the check runs on against the project's pins: "
        + ", ".join(
            f"{p['name']} {p['here'] or 'MISSING'}"
            + (" (bundle)" if p["from"] == "bundle" else "")
            + ("" if p["here"] == p["pinned"] else f" (pin {p['pinned']})")
            for p in report["pins"]
        )
    )
    print(
        "install: from the bundle: "
        + (", ".join(f"{r['name']} {r['version']}" for r in report["installed"]) or "nothing")
        + "; the machine's own kept: "
        + (", ".join(f"{r['name']} {r['here']}" for r in report["kept"]) or "none")
    )

    if chosen:
        site.mkdir(parents=True, exist_ok=True)
        done = pip_install([w.path for w in wheels if w.name in chosen], site)
        if done.returncode != 0:
            report["problems"].append(
                "pip install failed: " + " | ".join((done.stdout + done.stderr).strip().splitlines()[-8:])
            )
            return finish()
    versions, error = check_imports(site)
    report["versions"] = versions
    if error:
        report["problems"].append(f"importing what the check needs failed: {error}")
    else:
        print(
            "install: imports fine with the bundle on PYTHONPATH: " + ", ".join(f"{k} {v}" for k, v in versions.items())
        )
    return finish()


if __name__ == "__main__":
    sys.exit(main())
