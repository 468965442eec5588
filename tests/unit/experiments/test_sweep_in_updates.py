"""Staleness swept directly in optimizer updates: `staleness.s` becomes `staleness.k`
= s / (updates_per_step x epochs), run names say s, and a value that is no whole multiple is
refused naming the field."""

import json

import pytest

from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.services import experiment_plan


def test_s_in_updates_becomes_k_in_batches(tiny_config):
    tiny_config["algorithm"]["updates_per_step"] = 2
    planned = experiment_plan(name="s", config=tiny_config, sweep={"staleness.s": [0, 8, 32]})
    assert [p.config["staleness"]["k"] for p in planned] == [0, 4, 16]
    assert [p.name for p in planned] == ["s0", "s8", "s32"]
    ranged = experiment_plan(name="s", config=tiny_config, sweep={"staleness.s": {"linear": [0, 8, 3]}})
    assert [p.config["staleness"]["k"] for p in ranged] == [0, 2, 4]


@pytest.mark.parametrize(
    "sweep,message",
    [
        ({"staleness.s": [0, 6]}, "6 is not a whole multiple of 4 (updates_per_step x epochs): s = k x 4"),
        ({"staleness.s": [0, 8], "staleness.k": [1]}, "sweep staleness.s (updates) or staleness.k (batches), not both"),
        (
            {"staleness.s": [0, 8], "algorithm.epochs": [1, 2]},
            "s in updates needs one updates_per_step x epochs: with those swept, sweep staleness.k instead",
        ),
    ],
)
def test_bad_staleness_sweeps_name_the_field(tiny_config, sweep, message):
    tiny_config["algorithm"].update(updates_per_step=2, epochs=2)
    with pytest.raises(ConfigError) as caught:
        experiment_plan(name="s", config=tiny_config, sweep=sweep)
    assert caught.value.errors == [{"field": "sweep.staleness.s", "message": message}]


@pytest.mark.django_db
def test_the_api_takes_a_sweep_in_updates(alice, api_client, tiny_config):
    response = api_client(alice).post(
        "/api/v1/experiments/preview",
        data=json.dumps({"name": "s", "config": tiny_config, "sweep": {"staleness.s": [0, 4]}}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    assert [r["name"] for r in response.json()["runs"]] == ["s0", "s4"]
