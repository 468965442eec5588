"""A launcher like the example one (examples/launchers/launchers.yaml), pointed at this checkout."""

import copy
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_YAML = REPO / "examples" / "launchers" / "launchers.yaml"
SCRIPT = REPO / "examples" / "launchers" / "tiny_sdk.py"


def tiny_sdk(**overrides) -> dict:
    """The example's tiny-sdk definition with the script's real path."""
    data = copy.deepcopy(yaml.safe_load(EXAMPLE_YAML.read_text())[0])
    data["command"] = [str(SCRIPT) if entry.endswith("/tiny_sdk.py") else entry for entry in data["command"]]
    data.update(overrides)
    return data
