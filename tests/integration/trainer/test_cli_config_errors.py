"""A bad config exits 2 with the field named on stderr, before any model is loaded."""

import pytest

from tests.integration.trainer.cli_helpers import run_trainer, write_config

BAD = [
    ({"algorithm": {"objective": "foo"}}, "algorithm.objective"),
    ({"staleness": {"k": -2}}, "staleness.k"),
    ({"rollout": {"group_size": 1}}, "rollout.group_size"),
    ({"task": {"name": "math", "train_file": "/nonexistent/train.jsonl"}}, "task.train_file"),
    ({"task": {"eval_sets": ["aime2099"]}}, "task.eval_sets.0"),
    ({"algorithm": {"objectiv": "m2po"}}, "did you mean 'objective'"),
]


@pytest.mark.parametrize("data, field", BAD)
def test_bad_config_names_the_field_and_exits_2(tmp_path, data, field):
    run_dir = tmp_path / "run"
    result = run_trainer(write_config(tmp_path / "run.yaml", data), run_dir, timeout=60)
    assert result.returncode == 2, result.stderr
    assert field in result.stderr
    assert "[trainer]" not in result.stdout  # the trainer never started: no model was loaded
    assert not run_dir.exists()


def test_a_missing_benchmark_file_exits_2_naming_the_set_before_the_model_loads(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", {"task": {"eval_sets": ["aime24"]}})
    result = run_trainer(cfg, tmp_path / "run", timeout=60, OPL_BENCHMARKS_DIR=str(tmp_path / "empty"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "eval set 'aime24'" in result.stderr
    assert "[trainer]" not in result.stdout
