"""The correction lab's samples (docs/SAMPLES.md): each train sample carries the marks of
the run's own correction and of every other one on the same tokens. They are stored bounded,
refused with the field named when malformed, read back as the trainer wrote them, and shown on the
run page's samples card: one correction's marks, or two side by side with the tokens they mark
differently outlined, and the counts of each correction at the step."""

import re
from html import unescape

import pytest

from orchestrator.samples.models import RolloutSample
from orchestrator.samples.schemas import MAX_TOKENS
from tests.unit.metrics.helpers import make_run

from .helpers import batch, post, sample

pytestmark = pytest.mark.django_db

TOKENS = [" The", " sum", " is", " 1", "2", "."]
ENTROPY = [0.5, 2.0, 1.25, 3.0, 0.0625, 0.25]


def corrected(step, index, **extra):
    """A plain m2po run's sample as the contract writes it: m2po masked token 3; clip would have
    clipped 1 and 3, and dual-clip m2po would also have clipped 4; cispo reweights 1."""
    fields = {
        "tokens": TOKENS,
        "log_ratio": [0.0, 0.4, -0.1, 1.2, 0.9, 0.0],
        "masked": [3],
        "entropy": ENTROPY,
        "variant": "m2po",
        "advantage": -0.75,
        "reweighted": [],
        "counterfactual": {
            "grpo": {"masked": [], "clipped": [1, 3], "reweighted": []},
            "cispo": {"masked": [], "clipped": [], "reweighted": [1]},
            "m2po+dual_clip": {"masked": [3], "clipped": [4], "reweighted": []},
        },
    }
    return sample(step, index, **{**fields, **extra})


def flags(html: str) -> list[tuple[int, str]]:
    return [(int(i), f) for i, f in re.findall(r'data-i="(\d+)" data-log-ratio="[^"]*" data-flag="(\w*)"', html)]


def test_counterfactual_marks_are_stored_and_read_back_as_sent(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    sent = corrected(4, 0)
    assert post(client, run.pk, token, batch([sent, corrected(4, 1, counterfactual={})])).status_code == 200
    row = RolloutSample.objects.get(run=run, index=0)
    assert row.counterfactual == {"grpo": ".c.c", "cispo": ".r", "m2po+dual_clip": "...mc"}  # one character a token
    assert row.counterfactual_counts == {"grpo": [0, 2, 0], "cispo": [0, 0, 1], "m2po+dual_clip": [1, 1, 0]}
    assert (row.variant, row.advantage, row.n_reweighted) == ("m2po", -0.75, 0)
    assert row.entropies() == ENTROPY  # exact in float32
    client.force_login(alice)
    got = client.get(f"/api/v1/runs/{run.pk}/samples").json()["samples"][0]
    for key in ("variant", "advantage", "reweighted", "entropy", "counterfactual", "masked", "clipped"):
        assert got[key] == sent[key], key


def test_a_sample_from_before_the_correction_lab_still_reads(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    assert post(client, run.pk, token, batch([sample(1, 0, masked=[2])])).status_code == 200
    row = RolloutSample.objects.get(run=run)
    assert (row.own_variant, row.counterfactual, row.entropies(), row.marks_of("m2po")) == ("m2po", {}, [], "..m")
    client.force_login(alice)
    html = client.get(f"/runs/{run.pk}/samples/").content.decode()
    assert 'data-control="marks"' not in html and "data-marks-table" not in html  # nothing to choose from
    assert flags(html)[2] == (2, "masked")


BAD = [
    ({"counterfactual": {"grpo": {"clipped": [6]}}}, "samples.1.counterfactual.grpo.clipped", "outside the 6 tokens"),
    (
        {"counterfactual": {"grpo": {"masked": [2], "clipped": [2]}}},
        "samples.1.counterfactual.grpo.clipped",
        "also masked",
    ),
    ({"counterfactual": {"grpo": {"dropped": [1]}}}, "samples.1.counterfactual.grpo.dropped", "Extra inputs"),
    ({"counterfactual": {"GRPO; drop": {}}}, "samples.1.counterfactual", "not a variant name"),
    ({"counterfactual": {f"v{i}": {} for i in range(11)}}, "samples.1.counterfactual", "at most 10"),
    ({"variant": "m2po++x"}, "samples.1.variant", "not a variant name"),
    ({"variant": "m2po+" + "x" * 64}, "samples.1.variant", "at most 64"),
    ({"entropy": [0.1, 0.2]}, "samples.1.entropy", "2 values for 6 tokens"),
    ({"entropy": [0.1, -0.5, 0, 0, 0, 0]}, "samples.1.entropy", "negative"),
    ({"reweighted": [9]}, "samples.1.reweighted", "outside the 6 tokens"),
    ({"advantage": "big"}, "samples.1.advantage", "valid number"),
]


def test_a_bad_correction_field_refuses_the_batch_and_names_it(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    for change, field, says in BAD:  # one run for all the cases (a database per case costs CI time)
        response = post(client, run.pk, token, batch([corrected(1, 0), {**corrected(1, 1), **change}]))
        assert response.status_code == 400, (change, response.content)
        errors = {e["field"]: e["message"] for e in response.json()["errors"]}
        assert field in errors and says in errors[field], (change, errors)
    assert RolloutSample.objects.count() == 0


def test_marks_past_the_token_cut_are_cut_with_the_tokens(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    n = MAX_TOKENS + 5
    long = sample(
        1,
        0,
        tokens=["t"] * n,
        log_ratio=[0.0] * n,
        entropy=[1.0] * n,
        variant="grpo",
        counterfactual={"m2po": {"masked": [0, MAX_TOKENS + 2]}, "no_clip": {}},
    )
    assert post(client, run.pk, token, batch([long])).status_code == 200
    row = RolloutSample.objects.get(run=run)
    assert row.counterfactual == {"m2po": "m", "no_clip": ""} and len(row.entropies()) == MAX_TOKENS
    assert row.counterfactual_counts["m2po"] == [1, 0, 0]


def test_the_card_shows_the_chosen_correction_and_its_counts(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    post(
        client,
        run.pk,
        token,
        batch(
            [
                corrected(2, 0),
                corrected(6, 0),
                corrected(
                    6, 1, masked=[], counterfactual={"grpo": {"clipped": [4]}, "cispo": {}, "m2po+dual_clip": {}}
                ),
            ]
        ),
    )
    client.force_login(alice)
    own = client.get(f"/runs/{run.pk}/samples/").content.decode()
    assert re.search(r'<option value="m2po" selected>m2po \(this run\)</option><option value="grpo">grpo</option>', own)
    table = own[own.index("data-marks-table") : own.index("</table>")]
    counted = re.findall(
        r'data-variant="([^"]+)".*?data-count="masked">(\d+)</td><td class="num" data-count="clipped">(\d+)',
        table,
        re.S,
    )
    rows = {v: (int(m), int(c)) for v, m, c in counted}
    assert rows == {"m2po": (1, 0), "grpo": (0, 3), "cispo": (0, 0), "m2po+dual_clip": (1, 1)}  # summed over step 6
    assert "clips r to [1−ε_low, 1+ε_high]" in table and "bounds the A&lt;0, r≫1 tail" in table

    clip = client.get(f"/runs/{run.pk}/samples/", {"marks": "grpo"}).content.decode()
    first = clip[clip.index('data-index="0"') : clip.index('data-index="1"')]
    assert [i for i, f in flags(first) if f] == [1, 3] and {f for _, f in flags(first) if f} == {"clipped"}
    assert "what it would have done" in first
    assert re.search(
        r'<option value="6" selected>6 · 2 samples · 0 masked · 3 clipped', clip
    )  # the step list counts grpo's
    assert '<option value="2">2 · 1 sample · 0 masked · 2 clipped' in clip
    reweighted = client.get(f"/runs/{run.pk}/samples/", {"marks": "cispo", "step": "2"}).content.decode()
    assert flags(reweighted)[1] == (1, "reweighted") and "tok tok-reweighted" in reweighted


def test_two_corrections_side_by_side_outline_the_tokens_marked_by_one(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    post(client, run.pk, token, batch([corrected(3, 0)]))
    client.force_login(alice)
    html = client.get(f"/runs/{run.pk}/samples/", {"beside": "grpo"}).content.decode()
    sides = dict(re.findall(r'data-side="([^"]+)">(.*?)</div>\s*</div>', html, re.S))
    assert list(sides) == ["m2po", "grpo"]
    m2po, grpo = sides["m2po"], sides["grpo"]
    assert [i for i, f in flags(m2po) if f] == [3] and [i for i, f in flags(grpo) if f] == [1, 3]
    # token 1: clipped by grpo only; token 3: masked by m2po and clipped by grpo (both drop it, differently)
    assert re.findall(r'class="tok[^"]*tok-only[^"]*" data-i="(\d+)"', m2po) == ["1", "3"]
    assert 'data-i="1" data-log-ratio="0.4" data-flag="" data-entropy="2" data-other="clipped"' in m2po
    assert "0 dropped only here" in m2po and "1 dropped only here" in grpo
    contrast = re.sub(
        r"<[^>]+>", "", html[html.index("data-contrast") : html.index("</p>", html.index("data-contrast"))]
    )
    assert (
        "m2po drops 0 tokens that grpo keeps; grpo drops 1 that m2po keeps (mean entropy 2.000); both drop 1"
        in contrast
    )
    assert "all 6 tokens: mean entropy 1.177" in contrast  # (0.5 + 2 + 1.25 + 3 + 0.0625 + 0.25) / 6


def test_a_correction_the_step_did_not_record_is_a_400_naming_it(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    post(client, run.pk, token, batch([corrected(3, 0)]))
    client.force_login(alice)
    for params, field in [
        ({"marks": "sapo"}, "marks"),
        ({"beside": "grpo+seq_mask"}, "beside"),
        ({"marks": "<b>"}, "marks"),
    ]:
        response = client.get(f"/runs/{run.pk}/samples/", params)
        body = response.content.decode()
        assert response.status_code == 400 and f"{field}: step 3 recorded no marks of" in body and "<b>" not in body, (
            params
        )
        assert "it has m2po, grpo, cispo, m2po+dual_clip" in body
    hint = client.get(f"/runs/{run.pk}/samples/newer/", {"marks": "<b>"})  # the live hint carries only variant names
    assert hint.status_code == 400 and "marks: " in hint.content.decode()


def test_the_run_contrast_counts_the_tokens_one_correction_alone_drops_and_their_entropy(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    post(
        client,
        run.pk,
        token,
        batch(
            [
                corrected(3, 0),  # m2po masks 3; grpo clips 1 and 3: grpo alone drops token 1 (entropy 2.0, A<0)
                corrected(
                    5, 0, masked=[0, 4], advantage=0.5, counterfactual={"grpo": {"clipped": [2]}}
                ),  # m2po alone: 0, 4
                corrected(5, 1, counterfactual={"cispo": {}}),  # no grpo marks: left out, and counted as such
            ]
        ),
    )
    client.force_login(alice)
    html = client.get(f"/runs/{run.pk}/samples/corrections/").content.decode()
    assert re.search(r'<option value="m2po" selected>m2po \(this run\)', html)
    assert re.search(r'name="b" data-control="b">.*<option value="grpo" selected>', html)  # clip beside M2PO by default
    text = " ".join(
        unescape(
            re.sub(r"<[^>]+>", "", html[html.index("data-total") : html.index("</p>", html.index("data-total"))])
        ).split()
    )
    assert "Over 2 recorded steps (3 samples, 12 tokens" in text
    assert "m2po drops 2 tokens that grpo keeps (mean entropy 0.281, 0 with A<0)" in text  # (0.5 + 0.0625) / 2
    assert "grpo drops 2 that m2po keeps (mean entropy 1.625, 1 with A<0); both drop 1." in text  # (2.0 + 1.25) / 2
    assert "1 sample without both corrections' marks left out" in text
    steps = re.findall(r'<tr data-step="(\d+)">.*?data-only="a">(\d+)<.*?data-only="b">(\d+)<', html, re.S)
    assert steps == [("5", "2", "1"), ("3", "0", "1")]  # newest first
    assert "data-finding" not in html  # 2 tokens a side say nothing
    assert "step=5&amp;marks=m2po&amp;beside=grpo" in html  # each step opens the samples card on both marks
    swapped = client.get(f"/runs/{run.pk}/samples/corrections/", {"a": "grpo", "b": "m2po"}).content.decode()
    assert re.search(r'<tr data-step="5">.*?data-only="a">1<.*?data-only="b">2<', swapped, re.S)
    bad = client.get(f"/runs/{run.pk}/samples/corrections/", {"b": "sapo"})
    assert bad.status_code == 400 and "b: &#x27;sapo&#x27; was not recorded" in bad.content.decode()


def test_the_finding_names_the_correction_that_keeps_the_high_entropy_tokens(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    high = [3.0] * 6 + [0.1] * 6
    post(
        client,
        run.pk,
        token,
        batch(
            [
                corrected(
                    1,
                    0,
                    tokens=["x"] * 12,
                    log_ratio=[0.0] * 12,
                    entropy=high,
                    masked=[6, 7, 8, 9, 10],
                    counterfactual={"grpo": {"clipped": [0, 1, 2, 3, 4]}},
                )
            ]
        ),
    )
    client.force_login(alice)
    html = client.get(f"/runs/{run.pk}/samples/corrections/").content.decode()
    assert (
        "The tokens only grpo drops have the higher mean entropy (3.000 against 0.100 for those only m2po drops): "
        "m2po keeps more of the uncertain, informative tokens." in html
    )


def test_the_compare_page_contrasts_each_run_at_its_own_settings(client, alice, charlie, tiny_config):
    from orchestrator.experiments.services import experiment_create
    from orchestrator.experiments.tokens import derive_token, token_hash

    experiment = experiment_create(
        owner=alice, name="pair", config=tiny_config, sweep={"algorithm.objective": ["m2po", "grpo"]}
    )
    m2po_run, grpo_run, old_run = [*experiment.runs.order_by("id"), make_run(alice, tiny_config)[0]]
    for run in (m2po_run, grpo_run):
        run.attempt, run.token_salt, run.state = 1, "s", "running"
        run.token_hash = token_hash(derive_token(run.pk, 1, "s"))
        run.save()
    post(client, m2po_run.pk, derive_token(m2po_run.pk, 1, "s"), batch([corrected(2, 0)]))
    post(
        client,
        grpo_run.pk,
        derive_token(grpo_run.pk, 1, "s"),
        batch(
            [
                corrected(
                    2,
                    0,
                    variant="grpo+dual_clip",
                    masked=[],
                    clipped=[1, 2, 5],
                    counterfactual={"m2po+dual_clip": {"masked": [5], "clipped": [0]}, "cispo": {"reweighted": [1]}},
                )
            ]
        ),
    )
    client.force_login(alice)
    ids = f"{m2po_run.pk},{grpo_run.pk},{old_run.pk}"
    assert 'hx-get="/compare/samples/corrections/?runs=' in client.get("/compare/", {"runs": ids}).content.decode()
    html = client.get("/compare/samples/corrections/", {"runs": ids}).content.decode()
    rows = dict(re.findall(r'<tr data-run="(\d+)">.*?<td class="muted variant-names">([^<]+)</td>', html, re.S))
    assert rows == {str(m2po_run.pk): "m2po / grpo", str(grpo_run.pk): "m2po+dual_clip / grpo+dual_clip"}
    only = re.findall(
        r'<tr data-run="(\d+)">.*?data-only="a">(\d+)<.*?data-only="b">(\d+)<.*?<td class="num">(\d+)</td>\s*</tr>',
        html,
        re.S,
    )
    # the grpo run: m2po+dual_clip drops 0 and 5, grpo+dual_clip drops 1, 2 and 5 -> 1 alone, 2 alone, 1 both
    assert only == [(str(m2po_run.pk), "0", "1", "1"), (str(grpo_run.pk), "1", "2", "1")]
    assert f"Without counterfactual marks: {old_run.name}" in html
    client.force_login(charlie)
    assert client.get("/compare/samples/corrections/", {"runs": ids}).status_code == 404
    assert client.get(f"/runs/{m2po_run.pk}/samples/corrections/").status_code == 404
