"""POST /api/v1/runs/<id>/samples: idempotent on (run, kind, step, index), a later attempt
replaces, bad input refused whole with the field named, the run's own token only, gzip, text cut
to the bounds."""

import pytest

from orchestrator.samples.models import RolloutSample
from orchestrator.samples.schemas import MAX_TEXT, MAX_TOKENS
from tests.unit.metrics.helpers import make_run, start_attempt

from .helpers import batch, post, sample

pytestmark = pytest.mark.django_db


def stored(run):
    return list(
        RolloutSample.objects.filter(run=run)
        .order_by("kind", "step", "index")
        .values_list("kind", "step", "index", "attempt")
    )


def test_a_batch_is_stored_and_a_repost_changes_nothing(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    body = batch([sample(2, i, masked=[1], clipped=[3]) for i in range(4)] + [sample(2, 0, kind="eval")])
    first = post(client, run.pk, token, body)
    assert first.status_code == 200 and first.json() == {"stored": 5, "duplicates": 0, "dropped": 0}
    before = list(RolloutSample.objects.filter(run=run).order_by("pk").values())
    again = post(client, run.pk, token, body)
    assert again.json() == {"stored": 0, "duplicates": 5, "dropped": 0}
    assert list(RolloutSample.objects.filter(run=run).order_by("pk").values()) == before
    row = RolloutSample.objects.get(run=run, kind="train", index=1)
    assert (row.masked, row.clipped, row.n_masked, row.n_clipped, row.n_tokens) == ([1], [3], 1, 1, 5)
    assert row.log_ratios() == pytest.approx([0.01, -0.02, 0.03, -0.04, 0.05], abs=1e-6)
    assert row.max_abs_log_ratio == pytest.approx(0.05, abs=1e-6)


def test_a_later_attempt_replaces_the_same_sample(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    post(client, run.pk, token, batch([sample(4, 0, reward=0.0), sample(4, 1)]))
    run, token2 = start_attempt(run, 2)
    answer = post(client, run.pk, token2, batch([sample(4, 0, reward=1.0, tokens=["x"], log_ratio=[None])], attempt=2))
    assert answer.json() == {"stored": 1, "duplicates": 0, "dropped": 0}
    assert stored(run) == [("train", 4, 0, 2), ("train", 4, 1, 1)]
    replaced = RolloutSample.objects.get(run=run, step=4, index=0)
    assert (replaced.reward, replaced.tokens, replaced.log_ratios(), replaced.max_abs_log_ratio) == (
        1.0,
        ["x"],
        [None],
        None,
    )


def test_one_sample_twice_in_a_batch_keeps_the_last(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    answer = post(client, run.pk, token, batch([sample(1, 0, reward=0.0), sample(1, 0, reward=0.5)]))
    assert answer.json() == {"stored": 1, "duplicates": 1, "dropped": 0}
    assert RolloutSample.objects.get(run=run).reward == 0.5


@pytest.mark.parametrize(
    "change,field",
    [
        ({"step": -1}, "samples.1.step"),
        ({"kind": "test"}, "samples.1.kind"),
        ({"reward": "high"}, "samples.1.reward"),
        ({"log_ratio": [0.1]}, "samples.1.log_ratio"),
        ({"masked": [5]}, "samples.1.masked"),
        ({"clipped": [-1]}, "samples.1.clipped"),
        ({"colour": "red"}, "samples.1.colour"),
        ({"time": None}, "samples.1.time"),
    ],
)
def test_a_bad_field_refuses_the_whole_batch_and_names_the_field(client, alice, tiny_config, change, field):
    run, token = make_run(alice, tiny_config)
    response = post(client, run.pk, token, batch([sample(1, 0), {**sample(1, 1), **change}]))
    assert response.status_code == 400, response.content
    assert field in [e["field"] for e in response.json()["errors"]]
    assert RolloutSample.objects.count() == 0


def test_a_body_that_is_not_a_batch_is_a_400(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    assert post(client, run.pk, token, b"{not json").status_code == 400
    assert post(client, run.pk, token, b'{"samples": [{"reward": NaN}]}').status_code == 400
    response = post(client, run.pk, token, {"points": []})
    assert {e["field"] for e in response.json()["errors"]} >= {"samples"}
    response = post(client, run.pk, token, batch([sample(1, 0)], attempt=2))
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "attempt"


@pytest.mark.parametrize("token,status", [(None, 401), ("oplrun_wrong", 404)])
def test_a_missing_or_wrong_token_is_refused(client, alice, tiny_config, token, status):
    run, _ = make_run(alice, tiny_config)
    assert post(client, run.pk, token, batch([sample(1, 0)])).status_code == status
    assert RolloutSample.objects.count() == 0


def test_a_runs_token_cannot_write_another_runs_samples(client, alice, tiny_config):
    run_a, token_a = make_run(alice, tiny_config)
    run_b, _ = make_run(alice, tiny_config)
    assert post(client, run_b.pk, token_a, batch([sample(1, 0)])).status_code == 404
    assert RolloutSample.objects.count() == 0


def test_a_gzip_body_is_stored_like_a_plain_one(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    answer = post(client, run.pk, token, batch([sample(3, i) for i in range(3)]), gzipped=True)
    assert answer.status_code == 200 and answer.json()["stored"] == 3
    assert post(client, run.pk, token, b"\x1f\x8b broken", gzipped=False).status_code == 400


def test_long_text_and_tokens_are_cut_to_the_bounds(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    n = MAX_TOKENS + 10
    long = sample(
        1,
        0,
        prompt="p" * (MAX_TEXT + 5),
        tokens=["t"] * n,
        log_ratio=[0.0] * n,
        masked=[0, MAX_TOKENS + 3],
        reference="r" * (MAX_TEXT + 1),
    )
    long["response"] = "<b>" * 5000
    assert post(client, run.pk, token, batch([long])).status_code == 200
    row = RolloutSample.objects.get(run=run)
    assert (len(row.prompt), len(row.response), len(row.reference)) == (MAX_TEXT, MAX_TEXT, MAX_TEXT)
    assert (row.n_tokens, len(row.log_ratios()), row.masked, row.truncated) == (MAX_TOKENS, MAX_TOKENS, [0], True)


def test_nul_characters_and_lone_surrogates_are_stored_replaced(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    body = (
        '{"samples": ['
        + __import__("json")
        .dumps(sample(1, 0, tokens=["a", "b"], log_ratio=[0.1, 0.2]))
        .replace('"a"', '"\\u0000"')
        .replace('"b"', '"\\ud800"')
        + "]}"
    ).encode()
    assert post(client, run.pk, token, body).status_code == 200
    assert RolloutSample.objects.get(run=run).tokens == ["\ufffd", "\ufffd"]


def test_the_same_prompt_has_the_same_hash_in_two_runs(client, alice, tiny_config):
    (run_a, token_a), (run_b, token_b) = make_run(alice, tiny_config), make_run(alice, tiny_config)
    post(client, run_a.pk, token_a, batch([sample(1, 0, prompt="Compute 2+2.", kind="eval")]))
    post(client, run_b.pk, token_b, batch([sample(9, 3, prompt="Compute 2+2.", kind="eval")]))
    assert len(set(RolloutSample.objects.values_list("prompt_hash", flat=True))) == 1


def test_a_non_finite_reward_arrives_as_null_and_is_kept(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    assert post(client, run.pk, token, batch([sample(1, 0, reward=None, correct=False)])).json()["stored"] == 1
    assert RolloutSample.objects.get(run=run).reward is None
    client.force_login(alice)
    assert "reward <b>n/a</b>" in client.get(f"/runs/{run.pk}/samples/").content.decode()
