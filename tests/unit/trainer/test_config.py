"""RunConfig: the documented YAML loads, bad configs name the field, the schema drives a form."""

import pytest

from trainer.config import ConfigError, RunConfig, derive_sizes, load_config, parse_config

ISSUE_YAML = """
model: {name: tiny}
task: {name: arithmetic}
rollout: {engine: hf, group_size: 4, prompts_per_step: 8, max_new_tokens: 16, temperature: 1.0}
algorithm: {objective: m2po, tau_m2: 0.04, lr: 1.0e-3, updates_per_step: 2}
staleness: {mode: stale_k, k: 4}
train: {steps: 20, seed: 1}
eval: {every: 10}
checkpoint: {every: 5, keep: 2}
"""


def _problems(data):
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return dict(info.value.problems)


def test_the_documented_yaml_loads_and_derives_the_staleness(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(ISSUE_YAML)
    cfg = load_config(path)
    sizes = derive_sizes(cfg)
    assert (sizes.staleness_min, sizes.staleness_max) == (8, 8)  # k * U: the run is s8, and says 8
    assert sizes.total_updates == 40
    assert sizes.samples_per_step == 32


def test_defaults_are_valid():
    RunConfig()


def test_unknown_objective_lists_the_known_ones():
    problems = _problems({"algorithm": {"objective": "foo"}})
    msg = problems["algorithm.objective"]
    assert "unknown objective 'foo'" in msg and "m2po" in msg and "decoupled_ppo" in msg


def test_unknown_key_suggests_the_nearest():
    problems = _problems({"algorithm": {"objectiv": "m2po"}})
    assert "did you mean 'objective'" in problems["algorithm.objectiv"]


def test_negative_staleness_is_refused():
    assert "staleness.k" in _problems({"staleness": {"k": -1}})


def test_group_size_one_with_std_normalised_advantages_is_refused():
    problems = _problems({"rollout": {"group_size": 1}})
    assert "std" in problems["rollout.group_size"]


def test_missing_data_file_is_refused(tmp_path):
    problems = _problems({"task": {"name": "math", "train_file": str(tmp_path / "nope.jsonl")}})
    assert "no such file" in problems["task.train_file"]


def test_unknown_eval_set_is_refused_with_a_hint():
    problems = _problems({"task": {"eval_sets": ["arithmetic", "math5000"]}})
    assert "did you mean 'math500'" in problems["task.eval_sets.1"]


def test_async_bound_below_one_steps_own_staleness_is_refused():
    problems = _problems({"staleness": {"mode": "async", "max_staleness": 0}, "algorithm": {"updates_per_step": 2}})
    assert "staleness.max_staleness" in problems


def test_minibatches_must_hold_whole_groups():
    problems = _problems({"rollout": {"prompts_per_step": 6}, "algorithm": {"updates_per_step": 4}})
    assert "algorithm.updates_per_step" in problems


def test_a_file_that_is_not_a_mapping_is_refused(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(path)


def test_dashboard_secrets_come_from_the_environment_and_are_never_saved(monkeypatch):
    monkeypatch.setenv("OPL_DASHBOARD_URL", "http://dash.example:8000")
    monkeypatch.setenv("OPL_RUN_TOKEN", "s3cret-token")
    monkeypatch.setenv("OPL_ATTEMPT", "3")
    cfg = RunConfig()
    assert cfg.reporting.dashboard_url == "http://dash.example:8000"
    assert cfg.reporting.attempt == 3
    text = cfg.to_yaml()
    assert "s3cret-token" not in text and "dash.example" not in text
    # the saved YAML loads back (with the environment-derived fields refilled from the env)
    assert RunConfig.model_validate(__import__("yaml").safe_load(text)) == cfg


def test_schema_has_titled_sections_and_choice_lists():
    schema = RunConfig.model_json_schema()
    defs = schema["$defs"]
    for section in ("model", "task", "rollout", "algorithm", "staleness", "train", "eval", "checkpoint", "samples"):
        ref = schema["properties"][section]["$ref"].rsplit("/", 1)[-1]
        assert defs[ref]["title"] and defs[ref]["description"]
    assert defs["AlgorithmConfig"]["title"] == "Algorithm"
    assert defs["AlgorithmConfig"]["properties"]["objective"]["enum"] == [
        "m2po",
        "m2po_cap",
        "grpo",
        "no_clip",
        "gspo",
        "decoupled_ppo",
        "cispo",
        "sapo",
    ]
    assert "token" not in defs["ReportingConfig"]["properties"]
    for model in defs.values():
        for name, field in model["properties"].items():
            assert field.get("description"), f"{model['title']}.{name} has no description"
