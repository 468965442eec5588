"""The compare page and the run page's metrics partial, rendered by Django."""

import json

import pytest
from django.urls import reverse

from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.services import metrics_ingest
from trainer.metric_keys import METRIC_KEYS

from .helpers import make_run, points

pytestmark = pytest.mark.django_db


def config_json(response, element_id):
    html = response.content.decode()
    start = html.index(f'id="{element_id}"')
    start = html.index(">", start) + 1
    return json.loads(html[start : html.index("</script>", start)])


def sweep_runs(owner, tiny_config):
    experiment = experiment_create(
        owner=owner, name="sweep", config=tiny_config, sweep={"algorithm.objective": ["m2po", "grpo"]}, seeds=2
    )
    return experiment, list(experiment.runs.order_by("id"))


def test_compare_page_shows_only_differing_fields_and_summaries(client, alice, tiny_config):
    experiment, runs = sweep_runs(alice, tiny_config)
    assert len(runs) == 4
    for i, run in enumerate(runs):
        metrics_ingest(run=run, attempt=1, points=points("train/reward_mean", range(5), value=lambda s, i=i: s + i))
    client.force_login(alice)
    response = client.get(reverse("metrics-compare"), {"experiment": experiment.pk})
    assert response.status_code == 200
    page = config_json(response, "compare-config")
    assert "algorithm.objective" in page["fields"] and "model.name" not in page["fields"]
    assert [r["id"] for r in page["runs"]] == [r.pk for r in runs]
    assert page["summary"][str(runs[1].pk)]["train/reward_mean"] == {
        "last": 5.0,
        "last_step": 4,
        "min": 1.0,
        "max": 5.0,
        "best": 5.0,
        "direction": "max",
        "tail_mean": 5.0,
    }
    assert b'id="config-diff"' in response.content

    by_ids = client.get(reverse("metrics-compare"), {"runs": f"{runs[2].pk},{runs[0].pk}"})
    assert [r["id"] for r in config_json(by_ids, "compare-config")["runs"]] == [runs[2].pk, runs[0].pk]


def test_compare_page_refuses_runs_the_user_cannot_see(client, alice, charlie, tiny_config):
    run, _ = make_run(alice, tiny_config)
    client.force_login(charlie)
    assert client.get(reverse("metrics-compare"), {"runs": str(run.pk)}).status_code == 404
    assert client.get(reverse("metrics-compare"), {"runs": "x"}).status_code == 404
    client.logout()
    assert client.get(reverse("metrics-compare"), {"runs": str(run.pk)}).status_code == 302


def test_run_page_carries_the_default_panels_and_eval_sets(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    client.force_login(alice)
    cfg = config_json(client.get(reverse("exp-run-detail", args=[run.pk])), "run-metrics-config")
    assert "push_failures" not in {p["id"] for p in cfg["panels"]}  # only once a push failed
    metrics_ingest(
        run=run,
        attempt=1,
        points=points("eval/gsm8k/acc", [0])
        + points("eval/math500/acc", [0])
        + points("samples/push_failures", [0])
        + points("metrics/push_failures", [0]),
    )
    response = client.get(reverse("exp-run-detail", args=[run.pk]))
    assert response.status_code == 200
    cfg = config_json(response, "run-metrics-config")
    panels = {p["id"]: p["keys"] for p in cfg["panels"]}
    assert panels["push_failures"] == ["metrics/push_failures", "samples/push_failures"]
    assert panels["eval"] == ["eval/avg_acc", "eval/gsm8k/acc", "eval/math500/acc"]
    assert panels["m2"] == ["actor/m2", "actor/m2_after", "actor/m2_all"]
    assert {"reward", "clip_frac", "ppo_kl", "entropy", "grad_norm", "staleness", "response_len", "throughput"} <= set(
        panels
    )
    assert [a["id"] for a in cfg["x_axes"]] == ["step", "train_step", "tokens", "samples", "time"]
    assert all(a["key"] in METRIC_KEYS for a in cfg["x_axes"] if a["key"])  # keys the trainer logs


def test_compare_without_runs_offers_a_picker_and_accepts_its_checkboxes(client, alice, tiny_config):
    experiment, runs = sweep_runs(alice, tiny_config)
    client.force_login(alice)
    picker = client.get(reverse("metrics-compare"))
    assert picker.status_code == 200 and f'value="{runs[0].pk}"'.encode() in picker.content
    chosen = client.get(reverse("metrics-compare"), {"runs": [runs[0].pk, runs[3].pk]})
    assert [r["id"] for r in config_json(chosen, "compare-config")["runs"]] == [runs[0].pk, runs[3].pk]
