"""The compare page with the correction lab's options: a sweep over the dual clip or the
token mask groups by a `correction` field (objective and options), an option's settings read n/a
where it is off, and a run created before the options existed compares as having them off, not
as differing in every new field. The dashboard names variants as the trainer does."""

import itertools
import re

import pytest
from django.urls import reverse

from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.compare import comparable
from orchestrator.metrics.corrections import variant_of
from trainer.algo.counterfactual import run_variant
from trainer.config import parse_config

from .test_pages import config_json

pytestmark = pytest.mark.django_db


def compare(client, runs):
    response = client.get(reverse("metrics-compare"), {"runs": ",".join(str(r.pk) for r in runs)})
    assert response.status_code == 200
    page = config_json(response, "compare-config")
    rows = {
        field: re.findall(r"<td>([^<]*)</td>", cells)
        for field, cells in re.findall(r"<tr><td>([^<]+)</td>((?:<td>[^<]*</td>)+)</tr>", response.content.decode())
    }
    return page, rows  # rows: the config diff table, {field: [value per run]}


def test_a_dual_clip_sweep_groups_by_correction_and_an_older_run_compares_as_off(client, alice, tiny_config):
    experiment = experiment_create(
        owner=alice, name="dual", config=tiny_config, sweep={"algorithm.dual_clip_c": [None, 3.0]}
    )
    plain, dual = experiment.runs.order_by("id")
    older = experiment_create(owner=alice, name="older", config=tiny_config).runs.get()
    algorithm = {
        k: v
        for k, v in older.config["algorithm"].items()  # as stored before the correction lab's fields existed
        if k
        not in (
            "dual_clip_c",
            "token_mask",
            "token_mask_ref",
            "token_mask_low",
            "token_mask_high",
            "seq_mask",
            "seq_mask_ref",
            "seq_mask_low",
            "seq_mask_high",
            "sq_log_ratio_coef",
            "sapo_tau_pos",
            "sapo_tau_neg",
        )
    }
    Run.objects.filter(pk=older.pk).update(config={**older.config, "algorithm": algorithm})
    client.force_login(alice)
    page, rows = compare(client, [plain, dual, older])
    assert page["fields"][0] == "correction" and "algorithm.dual_clip_c" in page["fields"]
    assert not [
        f for f in page["fields"] if f.startswith(("algorithm.token_mask", "algorithm.seq_mask", "algorithm.sapo"))
    ]
    assert [r["config"]["correction"] for r in page["runs"]] == ["m2po", "m2po+dual_clip", "m2po"]
    assert [r["config"]["algorithm.dual_clip_c"] for r in page["runs"]] == ["off", 3.0, "off"]
    assert [r["fraction_label"] for r in page["runs"]] == [
        "masked (m2po)",
        "masked or clipped (m2po+dual_clip)",
        "masked (m2po)",
    ]
    assert rows["correction"] == ["m2po", "m2po+dual_clip", "m2po"] and rows["algorithm.dual_clip_c"] == [
        "off",
        "3.0",
        "off",
    ]
    _, same = compare(client, [plain, older])
    assert same == {}  # an older m2po run and a new one differ in nothing


def test_an_options_settings_read_n_a_where_it_is_off(client, alice, tiny_config):
    tiny_config["algorithm"].update(token_mask_low=0.3)
    experiment = experiment_create(
        owner=alice,
        name="mask",
        config=tiny_config,
        sweep={"algorithm.token_mask": [False, True], "algorithm.objective": ["m2po", "cispo"]},
    )
    runs = list(experiment.runs.order_by("id"))
    client.force_login(alice)
    page, _ = compare(client, runs)
    by = {r["config"]["correction"]: r["config"] for r in page["runs"]}
    assert set(by) == {"m2po", "m2po+token_mask", "cispo", "cispo+token_mask"}
    assert by["m2po"]["algorithm.token_mask_low"] == "n/a" and by["m2po+token_mask"]["algorithm.token_mask_low"] == 0.3
    assert "algorithm.sapo_tau_pos" not in page["fields"]  # no sapo run: its temperatures never apply


def test_the_dashboard_names_each_correction_as_the_trainer_does():
    names = set()
    for objective, dual, token, seq, tis, coef in itertools.product(
        ("m2po", "m2po_cap", "grpo", "no_clip", "gspo", "cispo", "sapo"),
        (None, 3.0),
        (False, True),
        (False, True),
        (None, 2.0),
        (0.0, 1e-3),
    ):
        if dual is not None and objective in ("cispo", "sapo"):
            continue  # refused by the config
        algorithm = {
            "objective": objective,
            "dual_clip_c": dual,
            "token_mask": token,
            "seq_mask": seq,
            "tis_cap": tis,
            "sq_log_ratio_coef": coef,
        }
        cfg = parse_config({"algorithm": algorithm, "rollout": {"behav_logp": "recompute"}})
        stored = cfg.model_dump(mode="json", exclude={"reporting"})
        assert variant_of(stored) == run_variant(cfg.algorithm) == comparable(stored)["correction"], algorithm
        names.add(variant_of(stored))
    assert len(names) == 7 * 16 + 5 * 16


def test_a_sweep_over_the_sequence_mask_the_penalty_and_sapos_gate_groups_by_correction(client, alice, tiny_config):
    """The options the first tests do not sweep: seq_mask with its band, the squared-log-ratio
    penalty's coefficient, and sapo's gate temperatures, each as a sweep axis on the compare page."""
    seq = experiment_create(
        owner=alice,
        name="seq",
        config=tiny_config,
        sweep={"algorithm.seq_mask": [False, True], "algorithm.sq_log_ratio_coef": [0.0, 1e-3]},
    )
    sapo_config = {**tiny_config, "algorithm": {**tiny_config["algorithm"], "objective": "sapo"}}
    sapo = experiment_create(
        owner=alice, name="sapo", config=sapo_config, sweep={"algorithm.sapo_tau_neg": [1.05, 2.0]}
    )
    runs = list(seq.runs.order_by("id")) + list(sapo.runs.order_by("id"))
    client.force_login(alice)
    page, rows = compare(client, runs)
    assert page["fields"][0] == "correction"
    assert [r["config"]["correction"] for r in page["runs"]] == [
        "m2po",
        "m2po+sq_penalty",
        "m2po+seq_mask",
        "m2po+seq_mask+sq_penalty",
        "sapo",
        "sapo",
    ]
    by_correction = {r["config"]["correction"]: r["config"] for r in page["runs"][:4]}
    assert by_correction["m2po"]["algorithm.seq_mask_high"] == "n/a"  # the band reads n/a where the mask is off
    assert by_correction["m2po+seq_mask"]["algorithm.seq_mask_high"] == 1.001
    assert [r["config"]["algorithm.sq_log_ratio_coef"] for r in page["runs"][:4]] == [
        0.0,
        0.001,
        0.0,
        0.001,
    ]  # as typed
    assert [r["config"]["algorithm.sapo_tau_neg"] for r in page["runs"][4:]] == [1.05, 2.0]
    assert page["runs"][0]["config"]["algorithm.sapo_tau_neg"] == "n/a"  # an m2po run has no gate
