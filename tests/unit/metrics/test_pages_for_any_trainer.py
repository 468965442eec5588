"""Pages built for the run they show: an SDK run's page charts its own keys grouped by prefix and
none of the bundled trainer's panels it has no data for, nor its progress, checkpoint and clone
cards; compare shows "—" for config fields a run does not have; and other trainers' off-policy
names (docs/OFF_POLICY_KEYS.md) fill the staleness, mismatch and clip panels and the alert rules."""

import json

import pytest
from django.test import Client
from django.urls import reverse

from orchestrator.alerts.models import Alert
from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import Run
from orchestrator.metrics.models import MetricSeries
from orchestrator.metrics.offpolicy_keys import aliases

from .helpers import make_run, points, push
from .test_pages import config_json

pytestmark = pytest.mark.django_db


def sdk_run(owner, client_id="client-pages-01", config=None):
    _, logging_token = logging_token_create(user=owner, name=client_id)
    body = {"client_id": client_id, "name": "sdk", "project": "lab", "config": config or {"lr": 0.001}}
    answer = (
        Client()
        .post(
            "/api/v1/sdk/runs",
            json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {logging_token}",
        )
        .json()
    )
    return Run.objects.get(pk=answer["id"]), answer["token"]


def logged(run, token, keys, steps=range(1, 6), value=lambda s: 0.1 * s):
    rows = [p for key in keys for p in points(key, steps, value=value)]
    answer = push(Client(), run.pk, token, {"points": rows})
    assert answer.status_code == 202 and not answer.json()["refused"], answer.content


def page_panels(client, run):
    response = client.get(f"/runs/{run.pk}/")
    assert response.status_code == 200
    return response, config_json(response, "run-metrics-config")["panels"]


def test_an_sdk_runs_page_charts_every_logged_key_grouped_by_prefix_and_nothing_else(client, alice):
    run, token = sdk_run(alice)
    keys = ["train/loss", "train/rewards/<lambda>/mean", "eval/Accuracy (val)", "lr", "train/reward_mean"]
    logged(run, token, keys)
    client.force_login(alice)
    response, panels = page_panels(client, run)
    charted = {k for p in panels for k in p["keys"]}
    assert charted == set(keys)
    assert all(p["keys"] for p in panels)  # no panel waits for data that will never come
    by_key = {p["keys"][0]: p for p in panels if p["id"].startswith("key-")}
    assert {k: p["group"] for k, p in by_key.items()} == {
        "eval/Accuracy (val)": "eval",
        "train/loss": "train",
        "train/rewards/<lambda>/mean": "train",
        "lr": "Charts",
    }
    assert [p["id"] for p in panels if not p["id"].startswith("key-")] == ["reward"]  # its key exists
    html = response.content.decode()
    assert "Clone and edit" not in html and 'id="run-checkpoints"' not in html and "Progress" not in html
    assert "Token fraction" not in html
    samples = client.get(reverse("samples-run", args=[run.pk])).content.decode()
    assert "log_samples" in samples and "samples.per_step" not in samples


def test_a_bundled_runs_page_keeps_its_panels_and_cards(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    client.force_login(alice)
    response, panels = page_panels(client, run)
    assert {"reward", "clip_frac", "m2", "staleness"} <= {p["id"] for p in panels}
    html = response.content.decode()
    assert "Clone and edit" in html and "Progress" in html


def test_compare_shows_a_dash_for_config_fields_a_run_does_not_have(client, alice, tiny_config):
    bundled, _ = make_run(alice, tiny_config)
    sdk, _ = sdk_run(alice, config={"lr": 0.001, "optim": {"beta": 0.9}})
    client.force_login(alice)
    html = client.get("/compare/", {"runs": f"{bundled.pk},{sdk.pk}"}).content.decode()
    table = html[html.index('id="config-diff"') :]
    assert "<tr><td>optim.beta</td><td>—</td><td>0.9</td></tr>" in table
    # the SDK run has no dual clip: never "off", never a default
    assert "<tr><td>algorithm.dual_clip_c</td><td>off</td><td>—</td></tr>" in table


VERL = [
    "training/off_policy/trajectory_staleness/mean",
    "training/off_policy/trajectory_staleness/max",
    "actor/pg_clipfrac",
    "rollout_corr/k3_kl",
    "rollout_corr/rollout_is_mean",
    "critic/score/mean",
]
TRL = [
    "train/clip_ratio/region_mean",
    "train/sampling/sampling_logp_difference/mean",
    "train/sampling/importance_sampling_ratio/mean",
    "train/reward",
]


@pytest.mark.parametrize(
    "keys,product_keys,panel_ids",
    [
        (
            VERL,
            {
                "rollout/staleness_mean",
                "rollout/staleness_max",
                "actor/clip_frac",
                "rollout/engine_kl_k3",
                "rollout/engine_is_weight_mean",
            },
            {"staleness", "clip_frac", "engine", "engine_is_weight"},
        ),
        (
            TRL,
            {"actor/clip_frac", "rollout/engine_abs_dlogp", "rollout/engine_is_weight_mean"},
            {"clip_frac", "engine", "engine_is_weight"},
        ),
    ],
    ids=["verl", "trl"],
)
def test_another_trainers_names_show_the_off_policy_panels(client, alice, keys, product_keys, panel_ids):
    run, token = sdk_run(alice)
    logged(run, token, keys)
    stored = set(MetricSeries.objects.filter(run=run).values_list("key", flat=True))
    assert stored == set(keys) | product_keys  # the run keeps its own names too
    client.force_login(alice)
    _, panels = page_panels(client, run)
    assert panel_ids <= {p["id"] for p in panels}
    charted = [k for p in panels for k in p["keys"]]
    assert len(charted) == len(set(charted))
    assert not set(aliases(keys)) & set(charted)  # a mirrored name is drawn once, by its panel
    series = client.get(f"/api/v1/runs/{run.pk}/metrics", {"key": "actor/clip_frac"}).json()["points"]
    assert series == [[s, pytest.approx(0.1 * s)] for s in range(1, 6)]


def test_the_clip_alert_rule_reads_a_verl_clip_fraction(alice):
    run, token = sdk_run(alice)
    logged(run, token, ["actor/pg_clipfrac"], steps=[1, 2], value=lambda s: 0.1 if s == 1 else 0.6)
    assert list(Alert.objects.filter(run=run).values_list("kind", "step")) == [("clip_ceiling", 2)]


def test_a_trainer_that_logs_the_product_key_keeps_its_own_value(alice):
    run, token = sdk_run(alice)
    rows = points("actor/pg_clipfrac", [1], value=lambda s: 0.9) + points("actor/clip_frac", [1], value=lambda s: 0.1)
    push(Client(), run.pk, token, {"points": rows})
    client = Client()
    client.force_login(alice)
    assert client.get(f"/api/v1/runs/{run.pk}/metrics", {"key": "actor/clip_frac"}).json()["points"] == [[1, 0.1]]


def test_eval_passes_are_not_read_as_training(alice):
    assert aliases(["eval/clip_ratio/region_mean", "train/clip_ratio/region_mean"]) == {
        "train/clip_ratio/region_mean": "actor/clip_frac"
    }
