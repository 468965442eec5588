"""model.name and task.hf_dataset: `name` or `org/name` is a hub id (or a preset) and stays one;
anything else names a file (`logs/../../../../etc` was taken for a hub id)."""

import pytest

from trainer.config import ConfigError, is_hub_id
from trainer.policy.models import hub_id_or_path


@pytest.mark.parametrize(
    "name,hub",
    [
        ("tiny", True),
        ("smollm2-135m", True),
        ("Qwen/Qwen3-1.7B-Base", True),
        ("org/name.v2", True),
        ("logs/../../../../etc", False),
        ("a/b/c", False),
        ("../run-1", False),
        ("./m", False),
        ("/abs/m", False),
        ("~/m", False),
        ("a..b/c", False),
        ("org/", False),
        ("", False),
        (".hidden", False),
    ],
)
def test_what_is_a_hub_id(name, hub):
    assert is_hub_id(name) is hub


def test_a_hub_id_is_never_loaded_from_a_folder_of_that_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a job runs in its run folder
    assert hub_id_or_path("org/name") == "org/name"
    (tmp_path / "org" / "name").mkdir(parents=True)
    with pytest.raises(ConfigError) as exc:
        hub_id_or_path("org/name")
    assert exc.value.problems[0][0] == "model.name"
