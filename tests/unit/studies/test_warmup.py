"""An experiment with a warm-up run (spec key `warmup_run`): one run first, every sweep run forks
from it and waits in the queue until it has ended. Through the paths a user takes: an experiment
file, the form and the API."""

import pytest
from django.test import Client

from orchestrator.experiments.experiment_file import dump_experiment_yaml, parse_experiment_yaml
from orchestrator.experiments.models import Experiment, Run
from orchestrator.experiments.queue import runs_to_dispatch, waiting_reasons
from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.schemas import ExperimentIn
from orchestrator.studies.warmup import COUNT, experiment_create_with_warmup, warmup_config
from orchestrator.web.experiment_form import draft_from_post, flat_from_spec

pytestmark = pytest.mark.django_db

STUDY_YAML = """
name: study
project: lab
seeds: 2
sweep:
  staleness.k: [0, 4]
warmup_run:
  algorithm: {objective: grpo, lr: 1.0e-3}
  staleness: {k: 0}
  train: {steps: 6}
config:
  model: {name: tiny}
  rollout: {group_size: 4, prompts_per_step: 4, max_new_tokens: 4}
  algorithm: {objective: m2po, lr: 1.0e-4, updates_per_step: 2}
  train: {steps: 4, device: cpu}
  eval: {every: 0}
  checkpoint: {every: 2}
"""


@pytest.fixture(autouse=True)
def runs_dir(settings, tmp_path):
    settings.RUNS_DIR = tmp_path / "runs"
    settings.MAX_ACTIVE_RUNS = 10


def _create_from_file(owner, text=STUDY_YAML):
    spec = ExperimentIn.model_validate(parse_experiment_yaml(text)).model_dump()
    return experiment_create_with_warmup(owner=owner, **spec)


def test_the_warm_up_run_is_created_first_and_every_sweep_run_forks_from_it(alice):
    sweep = _create_from_file(alice)
    warm_exp = Experiment.objects.get(name="study-warmup")
    warm = warm_exp.runs.get()
    assert warm.config["algorithm"]["objective"] == "grpo"
    assert warm.config["algorithm"]["lr"] == 1.0e-3
    assert warm.config["train"]["steps"] == 6
    assert warm.config["init"]["from_run"] is None  # the warm-up itself starts fresh
    assert warm.config["rollout"]["group_size"] == 4  # the rest comes from the experiment's config
    runs = list(sweep.runs.all())
    assert len(runs) == 4  # 2 staleness values x 2 seeds
    for run in runs:
        assert run.parent_id == warm.pk and run.parent_step is None
        assert run.config["init"]["from_run"] == warm.pk
        assert run.config["algorithm"]["objective"] == "m2po"
    assert sweep.project_id == warm_exp.project_id


def test_the_forks_wait_in_the_queue_until_the_warm_up_has_ended(alice):
    sweep = _create_from_file(alice)
    warm = Run.objects.get(experiment__name="study-warmup")
    assert runs_to_dispatch() == [warm.pk]
    reasons = waiting_reasons(list(sweep.runs.select_related("experiment__project")))
    assert all(f"#{warm.pk}" in r or str(warm.pk) in r for r in reasons.values()), reasons


def test_a_bad_warm_up_field_is_named_and_nothing_is_created(alice):
    bad = STUDY_YAML.replace("train: {steps: 6}", "train: {steps: -1}")
    with pytest.raises(ConfigError) as exc:
        _create_from_file(alice, bad)
    assert any(e["field"] == "warmup_run.train.steps" for e in exc.value.errors), exc.value.errors
    assert not Run.objects.exists() and not Experiment.objects.exists()


def test_a_refused_sweep_leaves_no_orphan_warm_up_run(alice):
    bad = STUDY_YAML.replace("staleness.k: [0, 4]", "staleness.k: [0, -4]")
    with pytest.raises(ConfigError):
        _create_from_file(alice, bad)
    assert not Run.objects.exists()


def test_the_warm_up_drops_the_sweeps_own_init_section():
    config = {"model": {"name": "tiny"}, "init": {"from_run": 7}, "train": {"steps": 4}}
    assert "init" not in warmup_config(config, {"train": {"steps": 9}})
    assert warmup_config(config, {"train": {"steps": 9}})["train"] == {"steps": 9}


def test_the_file_round_trips_through_the_form_and_export():
    spec = parse_experiment_yaml(STUDY_YAML)
    flat = flat_from_spec(spec)
    assert "objective: grpo" in flat["warmup_run"]
    draft = draft_from_post({**flat, "config_yaml": ""})
    assert not [e for e in draft.errors if e["field"] == "warmup_run"]
    assert draft.spec["warmup_run"] == spec["warmup_run"]
    assert parse_experiment_yaml(dump_experiment_yaml(spec))["warmup_run"] == spec["warmup_run"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("train: 3", "a mapping of config sections"),
        ("trainer: {steps: 3}", "unknown config section 'trainer'"),
        ("train: {steps: [", "not valid YAML"),
    ],
)
def test_the_form_names_a_bad_warm_up_box(text, message):
    flat = flat_from_spec(parse_experiment_yaml(STUDY_YAML))
    draft = draft_from_post({**flat, "warmup_run": text})
    errors = [e for e in draft.errors if e["field"] == "warmup_run"]
    assert errors and message in errors[0]["message"], draft.errors


def test_the_form_queues_the_warm_up_and_the_sweep(alice):
    client = Client()
    client.force_login(alice)
    flat = flat_from_spec(parse_experiment_yaml(STUDY_YAML))
    response = client.post("/experiments/new/", flat)
    assert response.status_code == 302, response.content.decode()[:2000]
    warm = Run.objects.get(experiment__name="study-warmup")
    assert Run.objects.filter(experiment__name="study", parent=warm).count() == 4


def test_the_api_creates_both_and_answers_with_the_warm_up_run(alice, api_client):
    spec = parse_experiment_yaml(STUDY_YAML)
    response = api_client(alice).post("/api/v1/experiments", spec, content_type="application/json")
    assert response.status_code == 201, response.content
    body = response.json()
    warm = Run.objects.get(experiment__name="study-warmup")
    assert body["warmup_run"] == warm.pk and len(body["runs"]) == 4
    preview = api_client(alice).post("/api/v1/experiments/preview", spec, content_type="application/json").json()
    assert preview["warmup_runs"] == 1 and preview["count"] == 4


def test_three_warm_ups_nest_every_cells_seeds_inside_each(alice):
    """warmup_run.count: 3 trains three warm-ups (three seeds, three checkpoints); every cell's seeds
    fork from each, and the statistics pool a cell over its warm-ups instead of splitting it."""
    from orchestrator.studies.table import build_table

    sweep = _create_from_file(alice, STUDY_YAML.replace("warmup_run:\n", "warmup_run:\n  count: 3\n"))
    warm = list(Run.objects.filter(experiment__name="study-warmup").order_by("seed"))
    assert len(warm) == 3 and len({w.config["train"]["seed"] for w in warm}) == 3
    assert all(COUNT not in w.config for w in warm)
    runs = list(sweep.runs.all())
    assert len(runs) == 3 * 2 * 2  # warm-ups x staleness values x seeds
    for w in warm:
        nested = [r for r in runs if r.parent_id == w.pk]
        assert sorted((r.sweep_values["staleness.k"], r.seed) for r in nested) == sorted(
            (k, s) for k in (0, 4) for s in {r.seed for r in runs}
        )
        assert all(r.config["init"]["from_run"] == w.pk for r in nested)
    cells = build_table(runs).cells
    assert len(cells) == 2 and all(len(c.run_ids) == 6 for c in cells.values())


@pytest.mark.parametrize("count", ["0", "11", "two"])
def test_a_bad_warm_up_count_is_named(alice, count):
    with pytest.raises(ConfigError) as exc:
        _create_from_file(alice, STUDY_YAML.replace("warmup_run:\n", f"warmup_run:\n  count: {count}\n"))
    assert [e["field"] for e in exc.value.errors] == ["warmup_run.count"]
    assert not Run.objects.exists()
