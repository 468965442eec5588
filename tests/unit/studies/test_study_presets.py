"""The study presets as the form reads them: the CPU study validates into its warm-up and forked
sweep; the GPU study (SmolLM2-135M, for a lent H200) validates as written and, under a tiny
override, really trains on the CPU (no GPU here: the override stands in for it)."""

from pathlib import Path

import pytest

from orchestrator.experiments.experiment_file import parse_experiment_yaml
from orchestrator.experiments.presets import get_preset
from orchestrator.experiments.runconfig import merge_config
from orchestrator.experiments.services import experiment_plan
from orchestrator.studies.run_rows import configured_staleness
from orchestrator.studies.warmup import warmup_count, warmup_plans
from trainer.config import parse_config
from trainer.loop import Trainer

# What a CPU dry run of the GPU check changes: the tiny model, a few small steps.
TINY = {
    "model": {"name": "tiny", "tiny_hidden_size": 32},
    "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 4},
    "algorithm": {"updates_per_step": 1},
    "train": {"steps": 2, "device": "cpu", "torch_threads": 1},
    "eval": {"every": 0, "at_start": False},
    "task": {"eval_max_problems": 2},
    "samples": {"per_step": 0},
}


def _spec(slug):
    preset = get_preset(slug)
    assert preset is not None, slug
    return parse_experiment_yaml(preset.path.read_text(), default_name=slug)


def test_the_cpu_study_forks_from_three_warm_ups_with_seeds_nested(db):
    spec = _spec("cpu-staleness-study")
    warmups = warmup_plans("w", spec["config"], spec["warmup_run"])
    assert warmup_count(spec["warmup_run"]) == 3 and len({w.config["train"]["seed"] for w in warmups}) == 3
    warm = warmups[0].config
    assert warm["task"]["demonstrations"] >= 1 and warm["task"]["fork_reward_power"] == 1.0
    runs = experiment_plan(name="s", config=spec["config"], sweep=spec["sweep"], seeds=spec["seeds"])
    assert spec["seeds"] >= 2 and {r.config["task"]["demonstrations"] for r in runs} == {0}
    # staleness 16-64 updates, each stale run at least 10x its staleness (the run-length check)
    stale = [configured_staleness(r.config) for r in runs if r.config["staleness"]["k"]]
    assert 16 <= max(stale) <= 64
    updates = max(r.config["train"]["steps"] * r.config["algorithm"]["updates_per_step"] for r in runs)
    assert updates >= 10 * max(stale)
    assert {r.config["task"]["name"] for r in runs} == {"forks"} and {
        r.config["task"]["fork_reward_power"] for r in runs
    } == {8.0}
    cells = {tuple(sorted(r.values.items())) for r in runs}
    assert len(runs) == len(cells) * spec["seeds"]


def test_the_gpu_study_validates_and_runs_under_a_tiny_override(db, tmp_path):
    spec = _spec("gpu-study-smollm2")
    runs = experiment_plan(name="g", config=spec["config"], sweep=spec["sweep"], seeds=spec["seeds"])
    assert {r.config["model"]["name"] for r in runs} == {"smollm2-135m"} and {
        r.config["train"]["device"] for r in runs
    } == {"cuda"}
    assert len(runs) == 6 and max(r.config["staleness"]["k"] for r in runs) * 4 == 64
    tiny = experiment_plan(
        name="g", config=merge_config(spec["config"], TINY), sweep=spec["sweep"], seeds=spec["seeds"]
    )
    stale_m2po = next(r for r in tiny if r.values == {"staleness.k": 16, "algorithm.objective": "m2po"})
    cfg = parse_config({**stale_m2po.config, "staleness": {**stale_m2po.config["staleness"], "k": 1}})
    assert Trainer(cfg, tmp_path / "run").run() == 0
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count('"actor/m2"') == 2


@pytest.mark.parametrize("slug", ["cpu-staleness-study", "gpu-study-smollm2"])
def test_study_presets_are_in_the_form(slug):
    assert Path(get_preset(slug).path).is_file() and "staleness" in get_preset(slug).title.lower()
