"""Every YAML the product writes for people (the form's Export YAML, a run's Config YAML, the
sweep file on an experiment's page) writes a multi-line prompt template as a literal block, line
for line, and names the values that decide what runs even at their defaults."""

import pytest
import yaml

from orchestrator.experiments.services import experiment_create
from orchestrator.web.experiment_form import flat_from_spec

pytestmark = pytest.mark.django_db
TEMPLATE = "Solve: {question}\nShow your work.\nAnswer:"
BLOCK = "  prompt_template: |-\n    Solve: {question}\n    Show your work.\n    Answer:\n"
CONFIG = {"model": {"name": "tiny"}, "task": {"prompt_template": TEMPLATE}, "train": {"device": "cpu", "steps": 4}}


def deciding_values(config):
    return (
        config["model"]["name"],
        config["task"]["name"],
        config["algorithm"]["objective"],
        config["staleness"]["mode"],
        config["staleness"]["k"],
        config["train"]["steps"],
        config["train"]["seed"],
    )


@pytest.fixture
def logged_in(client, alice):
    client.force_login(alice)
    return client


def test_export_yaml_from_the_form(logged_in):
    text = logged_in.post("/experiments/export", flat_from_spec({"name": "exp", "config": CONFIG})).content.decode()
    assert BLOCK in text
    data = yaml.safe_load(text)
    assert data["task"]["prompt_template"] == TEMPLATE
    assert deciding_values(data) == ("tiny", "arithmetic", "m2po", "stale_k", 0, 4, 1)


def test_a_runs_config_yaml_and_its_page(logged_in, alice):
    run = experiment_create(owner=alice, name="exp", config=CONFIG).runs.get()
    text = logged_in.get(f"/runs/{run.pk}/config.yaml").content.decode()
    assert BLOCK in text and yaml.safe_load(text)["task"]["prompt_template"] == TEMPLATE
    page = logged_in.get(f"/runs/{run.pk}/").content.decode()
    assert "prompt_template: |-\n    Solve: {question}\n    Show your work." in page


def test_the_sweep_file_on_the_experiments_page(logged_in, alice):
    experiment = experiment_create(owner=alice, name="sweep", config=CONFIG, sweep={"staleness.k": [0, 2]}, seeds=1)
    html = logged_in.get(f"/experiments/{experiment.pk}/").content.decode()
    assert "    prompt_template: |-\n      Solve: {question}\n      Show your work.\n      Answer:\n" in html
    for line in ("    objective: m2po\n", "    name: arithmetic\n", "    name: tiny\n"):
        assert line in html
