"""Which bundle wheels gpu-check.sh's install step picks on the GPU machine (scripts/gpu_check/install.py),
on crafted wheels: only what the interpreter lacks, a fallback where its version falls short, and
every unmet requirement named. Not marked gpu: no GPU needed."""

import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "scripts" / "gpu_check"


def load_install():
    sys.path.insert(0, str(TOOLS))  # install.py imports its sibling wheels.py, as when run there
    try:
        spec = importlib.util.spec_from_file_location("gpu_check_install", TOOLS / "install.py")
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(TOOLS))


install = load_install()


def make_wheel(folder: Path, name: str, version: str, *requires: str) -> Path:
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", meta)
    return path


def test_only_missing_wheels_and_short_fallbacks_are_installed(tmp_path):
    bundle = [
        install.read_wheel(make_wheel(tmp_path, *spec))
        for spec in (
            (
                "pydantic",
                "2.14.4",
                "typing-extensions>=4.16.0",
                "annotated-types>=0.6.0",
                "tomli; python_version < '3.0'",
            ),
            ("annotated-types", "0.8.0"),
            ("typing-extensions", "4.16.0"),
            ("mpmath", "1.3.0"),
        )
    ]
    here = {"typing-extensions": "4.12.2", "mpmath": "1.3.0", "torch": "2.11.0"}
    chosen, problems = install.select(bundle, here)
    assert chosen == {
        "pydantic": "missing here",
        "annotated-types": "missing here",
        "typing-extensions": "pydantic needs typing-extensions>=4.16.0; here: 4.12.2",
    }
    assert problems == []


def test_a_requirement_nothing_meets_is_named(tmp_path):
    bundle = [install.read_wheel(make_wheel(tmp_path, "math-verify", "0.9.0", "latex2sympy2_extended==1.11.0"))]
    chosen, problems = install.select(bundle, {"latex2sympy2-extended": "1.0.0"})
    assert list(chosen) == ["math-verify"]
    assert problems == ["math-verify 0.9.0 needs latex2sympy2_extended==1.11.0; here: 1.0.0, bundle: none"]


def test_the_client_built_from_the_checkout_replaces_one_the_machine_has(tmp_path):
    """The trainer reports through the client package: an opl-client already on the machine is
    another checkout's, so the bundle's goes in, and its own requirements are checked like any."""
    bundle = [install.read_wheel(make_wheel(tmp_path, "opl-client", "0.2.0", "PyYAML>=6", "numpy>=1.24"))]
    chosen, problems = install.select(bundle, {"opl-client": "0.2.0", "pyyaml": "6.0.4", "numpy": "1.23.0"})
    assert chosen == {"opl-client": "this repository's own"}
    assert problems == ["opl-client 0.2.0 needs numpy>=1.24; here: 1.23.0, bundle: none"]


def test_wheels_for_another_python_are_refused_before_pip_runs(tmp_path):
    make_wheel(tmp_path, "annotated-types", "0.8.0")
    (tmp_path / "manifest.json").write_text(json.dumps({"python_version": "2.7", "wheels": []}))
    done = subprocess.run(
        [sys.executable, str(TOOLS / "install.py"), str(tmp_path), str(tmp_path / "site"), str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert f"are for Python 2.7, this python3 is {ours}" in done.stdout and f"GPU_PYTHON_VERSION={ours}" in done.stdout
    assert not (tmp_path / "site").exists()
