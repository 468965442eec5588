"""The run page's samples card, the compare page's same-prompt section and the JSON read API:
they render what was stored, escape every text, filter by verdict and sort."""

import re

import pytest

from orchestrator.experiments.services import experiment_create
from orchestrator.samples import tokens
from orchestrator.samples.models import RolloutSample
from orchestrator.samples.schemas import SampleIn
from orchestrator.samples.services import samples_ingest
from tests.unit.metrics.helpers import make_run

from .helpers import sample

POSITIVE, NEGATIVE = tokens.POSITIVE, tokens.NEGATIVE

pytestmark = pytest.mark.django_db


def ingest(run, samples):
    return samples_ingest(run=run, attempt=1, samples=[SampleIn.model_validate(s) for s in samples])


def marks(html: str, flag: str) -> list[int]:
    return [int(i) for i in re.findall(rf'class="tok[^"]*tok-{flag}[^"]*" data-i="(\d+)"', html)]


def test_the_run_page_loads_the_samples_card(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'hx-get="/runs/{run.pk}/samples/"' in page


def test_a_run_without_samples_explains_how_to_turn_them_on(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    client.force_login(alice)
    html = client.get(f"/runs/{run.pk}/samples/").content.decode()
    assert "No samples recorded yet" in html and "samples.per_step" in html
    tiny_config["samples"] = {"per_step": 0}
    off, _ = make_run(alice, tiny_config)
    assert "samples.per_step: 0" in client.get(f"/runs/{off.pk}/samples/").content.decode()


def test_the_newest_step_is_shown_with_its_tokens_marked(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    ingest(
        run,
        [
            sample(2, 0),
            sample(10, 0, masked=[1, 3], clipped=[2], reward=0.0),
            sample(10, 1, log_ratio=[0.0, None, 2.0, -2.0, 0.1]),
        ],
    )
    client.force_login(alice)
    html = client.get(f"/runs/{run.pk}/samples/").content.decode()
    assert re.search(r'<option value="10" selected>10 · 2 samples · 2 masked · 1 clipped', html)
    assert '<option value="2">2 · 1 sample · 0 masked' in html
    first = html[html.index('data-index="0"') : html.index('data-index="1"')]
    assert marks(first, "masked") == [1, 3] and marks(first, "clipped") == [2]
    assert 'data-i="1" data-log-ratio="-0.02" data-flag="masked"' in first
    assert "2 masked" in first and "1 clipped" in first and "staleness 2" in first and "policy v8" in first
    second = html[html.index('data-index="1"') :]
    assert 'data-i="1" data-log-ratio="null" data-flag=""' in second and "tok-null" in second
    # a large ratio at full strength: the ratio's side's colour, strong enough for white text
    for i, ratio, base in ((2, "2", POSITIVE), (3, "-2", NEGATIVE)):
        style = re.search(
            rf'data-i="{i}" data-log-ratio="{ratio}" data-flag="" style="background:rgba\(([^)]*)\)"', second
        )
        *rgb, alpha = style.group(1).split(",")
        assert tuple(map(int, rgb)) == base and float(alpha) == pytest.approx(tokens.alpha(float(ratio), 1.0), abs=1e-3)
    assert "reward mean <b>0.500</b>" in html and '1 right</span> / <span class="verdict-wrong">1 wrong' in html
    assert "tok-legend" in html


def test_every_text_is_escaped(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    ingest(
        run,
        [
            sample(
                1,
                0,
                prompt="<script>alert(1)</script>",
                tokens=["<img src=x onerror=alert(1)>", '"'],
                log_ratio=[0.1, 0.2],
                reference="<b>4</b>",
            ),
            sample(1, 1, kind="eval", prompt="<i>q</i>", eval_set="<svg>"),
        ],
    )
    client.force_login(alice)
    html = client.get(f"/runs/{run.pk}/samples/").content.decode()
    assert "<script>alert" not in html and "<img src=x" not in html and "<b>4</b>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "&lt;script&gt;" in html
    eval_html = client.get(f"/runs/{run.pk}/samples/", {"kind": "eval"}).content.decode()
    assert "<svg>" not in eval_html and "<i>q</i>" not in eval_html and "&lt;svg&gt;" in eval_html


def test_filters_and_sorts(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    ingest(
        run,
        [
            sample(5, 0, reward=1.0, masked=[0], log_ratio=[0.1] * 5),
            sample(5, 1, reward=0.0, masked=[0, 1, 2], log_ratio=[0.01] * 5),
            sample(5, 2, reward=0.0, masked=[], log_ratio=[-0.9] + [0.0] * 4),
            sample(5, 3, reward=0.0, correct=True, log_ratio=[None] * 5),
        ],
    )  # the verdict wins over the reward
    client.force_login(alice)

    def order(**params):
        html = client.get(f"/runs/{run.pk}/samples/", params).content.decode()
        return [int(i) for i in re.findall(r'data-sample data-kind="train" data-step="5" data-index="(\d+)"', html)]

    assert order() == [0, 1, 2, 3]
    assert order(verdict="right") == [0, 3]
    assert order(verdict="wrong") == [1, 2]
    assert order(sort="ratio") == [2, 0, 1, 3]  # no finite log ratio: last
    assert order(sort="masked") == [1, 0, 2, 3]
    assert order(sort="reward", verdict="wrong") == [1, 2]


@pytest.mark.parametrize(
    "params,field",
    [
        ({"kind": "x"}, "kind"),
        ({"step": "99"}, "step"),
        ({"sort": "?"}, "sort"),
        ({"verdict": "maybe"}, "verdict"),
        ({"scale": "7"}, "scale"),
        ({"step": "1e3"}, "step"),
    ],
)
def test_a_bad_choice_is_a_400_naming_it(client, alice, tiny_config, params, field):
    run, _ = make_run(alice, tiny_config)
    ingest(run, [sample(1, 0)])
    client.force_login(alice)
    response = client.get(f"/runs/{run.pk}/samples/", params)
    assert response.status_code == 400 and f"{field}:" in response.content.decode()
    api = client.get(f"/api/v1/runs/{run.pk}/samples", params)
    assert api.status_code == 400 and api.json()["errors"][0]["field"] == field


def test_the_json_api_answers_the_spool_fields(client, alice, charlie, tiny_config):
    run, _ = make_run(alice, tiny_config)
    ingest(run, [sample(3, 0, masked=[4], log_ratio=[0.5, None, 0, 0, -1.25])])
    client.force_login(alice)
    body = client.get(f"/api/v1/runs/{run.pk}/samples").json()
    assert body["steps"] == [{"step": 3, "n": 1, "masked": 1, "clipped": 0}] and body["step"] == 3
    got = body["samples"][0]
    assert (got["masked"], got["log_ratio"], got["tokens"][0]) == ([4], [0.5, None, 0.0, 0.0, -1.25], " The")
    client.force_login(charlie)
    assert client.get(f"/api/v1/runs/{run.pk}/samples").status_code == 404
    assert client.get(f"/runs/{run.pk}/samples/").status_code == 404


def test_compare_shows_the_same_prompt_across_runs(client, alice, tiny_config):
    experiment = experiment_create(
        owner=alice, name="sweep", config=tiny_config, sweep={"algorithm.objective": ["m2po", "grpo"]}
    )
    run_a, run_b = experiment.runs.order_by("id")
    ingest(
        run_a, [sample(4, 0, kind="eval", prompt="Shared <q>", reward=1.0), sample(4, 1, kind="eval", prompt="Only A")]
    )
    ingest(run_b, [sample(8, 0, kind="eval", prompt="Shared <q>", reward=0.0, response="five")])
    client.force_login(alice)
    page = client.get("/compare/", {"runs": f"{run_a.pk},{run_b.pk}"}).content.decode()
    assert f'hx-get="/compare/samples/?runs={run_a.pk},{run_b.pk}"' in page
    html = client.get("/compare/samples/", {"runs": f"{run_a.pk},{run_b.pk}"}).content.decode()
    assert "Shared &lt;q&gt;" in html and "Only A" not in html
    columns = html.split('class="samples-column"')[1:]
    assert len(columns) == 2 and "✓ right" in columns[0] and "✗ wrong" in columns[1] and "five" in columns[1]
    assert "step 4" in columns[0] and "step 8" in columns[1]
    alone = client.get("/compare/samples/", {"runs": f"{run_a.pk}"}).content.decode()
    assert "No prompt was recorded by two of these runs yet" in alone


def test_a_train_sample_is_one_row_with_packed_log_ratios(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    ingest(run, [sample(1, 0, tokens=["a"] * 512, log_ratio=[0.25] * 512)])
    row = RolloutSample.objects.get(run=run)
    assert len(bytes(row.log_ratio)) == 4 * 512 and row.log_ratios() == [0.25] * 512
