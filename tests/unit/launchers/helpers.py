"""The example launcher (examples/launchers/launchers.yaml) as it ships: its script is found under
{repo}, the dashboard's checkout, so nothing is rewritten for the tests."""

import copy
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
EXAMPLE_YAML = REPO / "examples" / "launchers" / "launchers.yaml"
SCRIPT = REPO / "examples" / "launchers" / "tiny_sdk.py"


def tiny_sdk(**overrides) -> dict:
    """The example's tiny-sdk definition."""
    data = copy.deepcopy(yaml.safe_load(EXAMPLE_YAML.read_text())[0])
    data.update(overrides)
    return data
