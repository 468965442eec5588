"""What a user queues is what runs: a form sent back unchanged, a YAML file exported and
imported, the API, and "Fork from here" all queue the very config that went in.

The form is read from the rendered page the way a browser reads it (browser_form.py): a one-line
box loses the newline of the default prompt template, which Django's test client fed with
flat_from_spec's dict never showed.
"""

import json

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile

from orchestrator.experiments.models import Experiment
from orchestrator.experiments.presets import list_presets
from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.compare import differing_fields
from tests.unit.experiments.browser_form import submitted_fields
from trainer.data.benchmarks import MATH_PROMPT_TEMPLATE

pytestmark = pytest.mark.django_db

FORM = "experiment-form"
# Every kind of field with a value other than its default: a multi-line string with a leading
# newline and trailing spaces, a list, a null over a non-null default, a float that %g would round.
EDGE_CONFIG = {
    "model": {"name": "tiny", "tiny_layers": 1},
    "task": {
        "prompt_template": "\nQ: {question}\n\n  A (boxed):  ",
        "eval_sets": ["arithmetic", "gsm8k"],
        "eval_max_problems": None,
    },
    "rollout": {"group_size": 2, "prompts_per_step": 4, "max_new_tokens": 8, "temperature": 0.123456789},
    "algorithm": {"objective": "grpo", "eps_high": 0.28, "loss_agg": "seq-mean-token-mean", "lr": 3.3333333333e-4},
    "train": {"steps": 3, "device": "cpu", "seed": -7},
    "eval": {"every": 0, "max_new_tokens": 12},
    "checkpoint": {"keep_best_metric": "eval/avg_acc"},
}


@pytest.fixture
def logged_in(client, alice):
    client.force_login(alice)
    return client


def _queue_page(client, html: str) -> Experiment:
    """Send the page's experiment form back as it is: the experiment it queued."""
    before = set(Experiment.objects.values_list("pk", flat=True))
    response = client.post("/experiments/new/", submitted_fields(html, FORM))
    assert response.status_code == 302, _errors(response)
    (created,) = Experiment.objects.exclude(pk__in=before).exclude(name__endswith="-warmup")
    return created


def _errors(response) -> str:
    return " | ".join(line.strip() for line in response.content.decode().splitlines() if 'class="error"' in line)


def _queued(experiment: Experiment) -> dict:
    """Everything the experiment queued; a warm-up run's id (different for each copy) as WARM, or
    WARM<i> for the i-th of several warm-ups the sweep forks from (in names and swept values too)."""
    sweep = json.loads(json.dumps(experiment.sweep or {}))
    warmups = {pk: f"WARM{i}" for i, pk in enumerate(sorted(sweep.get("init.from_run") or []))}
    if warmups:
        sweep["init.from_run"] = [warmups[pk] for pk in sweep["init.from_run"]]
    runs = []
    for run in experiment.runs.order_by("id"):
        config = json.loads(json.dumps(run.config))
        values, name = dict(run.sweep_values or {}), run.name
        if values.get("init.from_run") in warmups:
            pk = values["init.from_run"]
            values["init.from_run"] = config["init"]["from_run"] = warmups[pk]
            name = name.replace(f"fromrun{pk}", f"fromrun{warmups[pk]}")
        elif experiment.runs.model.objects.filter(
            pk=run.parent_id, experiment__name=f"{experiment.name}-warmup"
        ).exists():
            config["init"]["from_run"] = "WARM"
        runs.append((name, run.seed, values, config, sorted(t.name for t in run.tags.all())))
    fields = ("name", "random", "seeds", "priority", "notes")
    experiment_fields = {f: getattr(experiment, f) for f in fields} | {"sweep": sweep}
    return {"experiment": experiment_fields, "project": experiment.project.name, "runs": runs}


def _leaves(config: dict, prefix: str = ""):
    for key, value in config.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize("preset", list_presets(), ids=lambda p: p.slug)
def test_a_preset_queues_the_same_runs_through_the_api_the_form_and_its_yaml(logged_in, api_client, alice, preset):
    spec = preset.spec()
    response = api_client(alice).post("/api/v1/experiments", data=json.dumps(spec), content_type="application/json")
    assert response.status_code == 201, response.content
    by_api = _queued(Experiment.objects.get(pk=response.json()["id"]))
    for run in by_api["runs"]:  # the file's own values, exactly (the prompt's newline among them)
        config = run[3]
        for path, value in _leaves(spec["config"]):
            if path not in (spec.get("sweep") or {}) and path != "train.seed" and not path.startswith("init."):
                section, name = path.split(".", 1)
                assert config[section][name] == value, path
        assert config["task"]["prompt_template"] == spec["config"].get("task", {}).get(
            "prompt_template", MATH_PROMPT_TEMPLATE
        )

    page = logged_in.get(f"/experiments/new/?preset={preset.slug}").content.decode()
    assert _queued(_queue_page(logged_in, page)) == by_api

    exported = logged_in.post("/experiments/export", submitted_fields(page, FORM))
    assert exported.status_code == 200
    upload = SimpleUploadedFile(f"{preset.slug}.yaml", exported.content)
    imported = logged_in.post("/experiments/import", {"file": upload}).content.decode()
    assert _queued(_queue_page(logged_in, imported)) == by_api


def test_every_kind_of_field_comes_back_from_the_form_and_the_api_as_it_went_in(logged_in, api_client, alice):
    spec = {"name": "edges", "project": "lab", "config": EDGE_CONFIG, "notes": "\nfirst line\r\nsecond line  \n"}
    response = api_client(alice).post("/api/v1/experiments", data=json.dumps(spec), content_type="application/json")
    assert response.status_code == 201, response.content
    (run_id,) = response.json()["runs"]
    queued = api_client(alice).get(f"/api/v1/runs/{run_id}").json()["config"]
    assert queued["task"]["prompt_template"] == EDGE_CONFIG["task"]["prompt_template"]
    assert queued["rollout"]["temperature"] == 0.123456789 and queued["algorithm"]["lr"] == 3.3333333333e-4
    assert queued["task"]["eval_max_problems"] is None and queued["task"]["eval_sets"] == ["arithmetic", "gsm8k"]

    clone = logged_in.get(f"/experiments/new/?clone={run_id}").content.decode()
    assert (
        'name="task.prompt_template"' in clone and "<textarea" in clone.split('name="task.prompt_template"')[0][-300:]
    )
    experiment = _queue_page(logged_in, clone)
    assert experiment.runs.get().config == queued

    page = logged_in.post(
        "/experiments/import", {"yaml": yaml.safe_dump({"name": "edges", "config": queued})}
    ).content.decode()
    fields = submitted_fields(page, FORM)
    fields["notes"] = "\r\nfirst line\r\nsecond line  \r\n"  # typed by hand: the browser sends CR LF
    before = set(Experiment.objects.values_list("pk", flat=True))
    assert logged_in.post("/experiments/new/", fields).status_code == 302
    typed = Experiment.objects.exclude(pk__in=before).get()
    assert typed.runs.get().config == queued and typed.notes == "\nfirst line\nsecond line  \n"


def test_fork_from_here_queues_the_parents_config_and_compare_lists_only_the_fork(logged_in, alice):
    parent = experiment_create(owner=alice, name="parent", project="lab", config=EDGE_CONFIG).runs.get()
    page = logged_in.get(f"/experiments/new/?fork={parent.pk}").content.decode()
    child = _queue_page(logged_in, page).runs.get()
    assert child.config == {**parent.config, "init": {**parent.config["init"], "from_run": parent.pk}}
    assert differing_fields([parent.config, child.config]) == ["init.from_run"]
