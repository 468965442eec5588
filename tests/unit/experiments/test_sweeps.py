import pytest

from orchestrator.experiments.models import Run
from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.services import experiment_create, experiment_plan
from orchestrator.experiments.sweeps import GRID_SHAPES, format_value, parse_sweep, sweep_count, sweep_points

pytestmark = pytest.mark.django_db


def values(grid=None, random=None, seeds=1, path=None):
    points = sweep_points(parse_sweep(grid, random, seeds))
    return [p.values[path] for p in points] if path else points


def test_list_linear_and_log_ranges():
    assert values({"staleness.k": [0, 16]}, path="staleness.k") == [0, 16]
    assert values({"rollout.temperature": {"linear": [0.5, 1.0, 3]}}, path="rollout.temperature") == [0.5, 0.75, 1.0]
    assert values({"staleness.k": {"linear": [0, 64, 5]}}, path="staleness.k") == [0, 16, 32, 48, 64]
    assert values({"algorithm.lr": {"log": [1e-6, 1e-4, 3]}}, path="algorithm.lr") == [1e-6, 1e-5, 1e-4]


def test_grid_times_seeds_counts_before_expanding():
    spec = parse_sweep({"staleness.k": [0, 16, 64, 256], "algorithm.objective": ["grpo", "no_clip", "m2po"]}, None, 3)
    assert sweep_count(spec) == 36
    assert len(sweep_points(spec)) == 36


def test_random_search_is_reproducible_and_within_bounds():
    random = {
        "samples": 5,
        "seed": 7,
        "params": {
            "algorithm.lr": {"loguniform": [1e-6, 1e-3]},
            "rollout.group_size": {"randint": [2, 8]},
            "algorithm.objective": {"choice": ["grpo", "m2po"]},
        },
    }
    first, second = values(random=random), values(random=random)
    assert [p.values for p in first] == [p.values for p in second]
    assert len(first) == 5
    for p in first:
        assert 1e-6 <= p.values["algorithm.lr"] <= 1e-3
        assert 2 <= p.values["rollout.group_size"] <= 8
        assert p.values["algorithm.objective"] in ("grpo", "m2po")


def test_paper_sweep_names_show_s_objective_and_seed(tiny_config):
    tiny_config["algorithm"]["updates_per_step"] = 4
    planned = experiment_plan(
        name="x",
        config=tiny_config,
        seeds=3,
        sweep={
            "staleness.k": [0, 4, 16, 64],
            "algorithm.objective": ["grpo", "no_clip", "m2po"],
            "algorithm.lr": [1e-6],
        },
    )
    names = [p.name for p in planned]
    assert len(names) == len(set(names)) == 36
    assert "m2po-s256-seed2" in names  # k=64 x 4 updates per step; a single-valued field is not named
    assert {p.seed for p in planned} == {1, 2, 3}


def test_names_show_every_swept_value():
    assert format_value(1e-6) == "1e-6" and format_value(0.04) == "0.04"
    planned = experiment_plan(
        name="x",
        config={"algorithm": {"updates_per_step": 2}},
        sweep={"algorithm.lr": [1e-6, 2e-6], "algorithm.objective": ["m2po"], "staleness.k": [128]},
        seeds=2,
    )
    assert [p.name for p in planned] == ["lr1e-6-seed1", "lr1e-6-seed2", "lr2e-6-seed1", "lr2e-6-seed2"]


def test_single_run_takes_the_experiment_name(tiny_config):
    assert [p.name for p in experiment_plan(name="baseline", config=tiny_config)] == ["baseline"]


def test_a_sweep_over_the_maximum_is_refused_showing_its_count(settings, tiny_config):
    settings.OPL_MAX_SWEEP_RUNS = 100
    with pytest.raises(ConfigError) as exc:
        experiment_plan(name="x", config=tiny_config, sweep={"staleness.k": list(range(11))}, seeds=10)
    assert exc.value.errors == [{"field": "sweep", "message": "expands to 110 runs, more than the maximum of 100"}]


def test_default_maximum_is_5000(tiny_config):
    with pytest.raises(ConfigError, match="5001 runs, more than the maximum of 5000"):
        experiment_plan(name="x", config=tiny_config, sweep={"staleness.k": list(range(5001))})


def test_a_swept_value_the_trainer_rejects_names_the_sweep_field(alice, tiny_config):
    with pytest.raises(ConfigError) as exc:
        experiment_create(owner=alice, name="x", config=tiny_config, sweep={"algorithm.objective": ["m2po", "ppo"]})
    [error] = exc.value.errors
    assert error["field"] == "sweep.algorithm.objective" and "'ppo'" in error["message"]
    assert Run.objects.count() == 0


def test_bad_range_spec_names_the_field():
    with pytest.raises(ConfigError) as exc:
        parse_sweep({"algorithm.lr": {"log": [1e-6, 1e-4]}, "staleness.k": []}, None, 1)
    assert exc.value.errors == [{"field": "sweep.staleness.k", "message": "give at least one value"}]
    with pytest.raises(ConfigError) as exc:
        parse_sweep({"algorithm.lr": {"log": [1e-6, 1e-4]}}, None, 1)
    assert exc.value.errors == [{"field": "sweep.algorithm.lr", "message": GRID_SHAPES}]
    with pytest.raises(ConfigError, match="start and stop > 0"):
        sweep_points(parse_sweep({"algorithm.lr": {"log": [0, 1e-4, 3]}}, None, 1))


def test_created_runs_carry_gpus_tags_and_values(alice, tiny_config):
    experiment = experiment_create(
        owner=alice, name="x", config=tiny_config, sweep={"staleness.k": [0, 4]}, tags=["demo", "sweep"], priority=3
    )
    runs = list(experiment.runs.order_by("id"))
    assert [r.sweep_values for r in runs] == [{"staleness.k": 0}, {"staleness.k": 4}]
    assert {r.priority for r in runs} == {3}
    assert {r.gpus for r in runs} == {0}  # the tiny CPU model needs no GPU
    assert sorted(t.name for t in runs[0].tags.all()) == ["demo", "sweep"]
