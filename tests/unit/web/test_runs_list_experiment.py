"""Runs of different sweeps share names (grpo-s0): the runs list says each run's experiment,
linked, beside its name."""

import pytest

from orchestrator.experiments.services import experiment_create

pytestmark = pytest.mark.django_db


def test_each_run_names_its_experiment(client, alice, tiny_config):
    first = experiment_create(owner=alice, name="sweep-a", config=tiny_config, sweep={"staleness.k": [0, 2]})
    second = experiment_create(owner=alice, name="sweep-b", config=tiny_config, sweep={"staleness.k": [0, 2]})
    assert first.runs.get(name="s0") and second.runs.get(name="s0")  # the same name twice
    client.force_login(alice)
    page = client.get("/").content.decode()
    for experiment in (first, second):
        run = experiment.runs.get(name="s0")
        row = page[page.index(f'id="run-row-{run.pk}"') :]
        row = row[: row.index("</tr>")]
        assert f'in <a href="/experiments/{experiment.pk}/">{experiment.name}</a>' in row
