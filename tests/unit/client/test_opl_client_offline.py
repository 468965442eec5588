"""The opl client's own logic, without a server: where settings come from, how a YAML file becomes
an experiment spec, and a clear exit when the dashboard cannot be reached."""

import io

import pytest
import yaml

from opl_client import cli
from opl_client.config import load_settings
from opl_client.specs import experiment_spec


def test_arguments_win_over_the_environment_which_wins_over_the_file(tmp_path, monkeypatch):
    config = tmp_path / "config"
    config.write_text("[default]\nurl = http://file.example/\ntoken = from-file\n")
    monkeypatch.setenv("OPL_CONFIG", str(config))
    monkeypatch.delenv("OPL_URL", raising=False)
    monkeypatch.delenv("OPL_TOKEN", raising=False)
    assert load_settings() == load_settings(None, None)
    assert (load_settings().url, load_settings().token) == ("http://file.example", "from-file")
    monkeypatch.setenv("OPL_TOKEN", "from-env")
    assert load_settings().token == "from-env"
    assert load_settings(url="http://arg.example", token="from-arg").token == "from-arg"


def test_a_plain_run_config_and_an_experiment_file_both_become_specs(tmp_path):
    plain = tmp_path / "tiny.yaml"
    plain.write_text(yaml.safe_dump({"model": {"name": "tiny"}, "train": {"steps": 2}}))
    assert experiment_spec(plain) == {"config": {"model": {"name": "tiny"}, "train": {"steps": 2}}, "name": "tiny"}
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump({"name": "s", "sweep": {"staleness.s": [0, 8]}, "config": {"model": {"name": "tiny"}}})
    )
    assert experiment_spec(sweep, project="lab", seeds=None) == {
        "name": "s",
        "sweep": {"staleness.s": [0, 8]},
        "config": {"model": {"name": "tiny"}},
        "project": "lab",
    }
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n")
    with pytest.raises(ValueError, match="expected a mapping"):
        experiment_spec(bad)


def test_an_unreachable_dashboard_is_a_one_line_error(capsys):
    code = cli.main(["--url", "http://127.0.0.1:9", "--token", "t", "runs"], out=io.StringIO())
    assert code == 1
    assert capsys.readouterr().err.startswith("opl: ")
