"""The client is an installed distribution, not a folder that happens to be on the path: `opl` and
`opl_client` come from the files pip installed for opl-client (from this checkout's client/ in a
development venv, where the install is editable), whatever the working directory, and the
repository's root holds no link to client/."""

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import opl
import opl_client

REPO = Path(__file__).resolve().parents[3]
WHERE = "import json, opl, opl_client; print(json.dumps([opl.__file__, opl_client.__file__]))"


def installed_files(dist: importlib.metadata.Distribution) -> set[Path]:
    """The package files the distribution's metadata points at: its editable source folder's, or
    those its RECORD lists."""
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct.get("dir_info", {}).get("editable"):
        source = Path(unquote(urlsplit(direct["url"]).path))
        assert source.resolve() == (REPO / "client").resolve(), (
            f"this venv's opl-client is the editable install of {source}, not of this checkout's client/: "
            f"its tests would run that copy; `pip install -e ./client` in this checkout's own venv"
        )
        return {p.resolve() for p in source.rglob("*.py")}
    return {Path(dist.locate_file(f)).resolve() for f in dist.files or ()}


def test_opl_and_opl_client_are_the_installed_distributions_files():
    dist = importlib.metadata.distribution("opl-client")
    files = installed_files(dist)
    assert Path(opl_client.__file__).resolve() in files
    assert Path(opl.__file__).resolve() in files
    assert {e.name for e in dist.entry_points if e.group == "console_scripts"} == {"opl"}
    assert "opl" in {e.name for e in dist.entry_points if e.group == "verl.plugins"}
    assert not os.path.lexists(REPO / "opl") and not os.path.lexists(REPO / "opl_client")


def test_any_working_directory_imports_the_same_files(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = subprocess.run(
        [sys.executable, "-c", WHERE], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(found) == [opl.__file__, opl_client.__file__]
