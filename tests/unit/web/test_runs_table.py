"""The runs table: the filter language, sorting, paging, htmx fragments and row actions."""

import re

import pytest
from django.test import Client

from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create, run_set_tags, run_transition
from orchestrator.web.runquery import QueryError, parse_query

pytestmark = pytest.mark.django_db


@pytest.fixture
def sweep(alice, tiny_config):
    return experiment_create(
        owner=alice,
        name="s",
        project="lab",
        config=tiny_config,
        sweep={"staleness.k": [0, 16, 64, 256], "algorithm.objective": ["grpo", "m2po"]},
    )


def names(query: str) -> list[str]:
    return sorted(Run.objects.filter(parse_query(query)).values_list("name", flat=True))


def test_config_fields_compare_as_numbers_and_strings(sweep):
    assert names("algorithm.objective = m2po and staleness.k >= 64") == ["m2po-s128", "m2po-s512"]
    assert names("staleness.k < 16") == ["grpo-s0", "m2po-s0"]
    assert names("algorithm.objective != grpo and staleness.k in (0, 256)") == ["m2po-s0", "m2po-s512"]


def test_run_columns_tags_and_contains(sweep, alice):
    run = sweep.runs.get(name="grpo-s32")
    run_set_tags(run=run, tags=["keep", "baseline"])
    assert names("tag = keep") == ["grpo-s32"]
    assert names("tag in (keep, baseline)") == ["grpo-s32"]  # no duplicate rows
    assert names("user = alice and name ~ s51") == ["grpo-s512", "m2po-s512"]
    assert names('project = "lab" and state = queued and tag != keep') == sorted(
        n for n in sweep.runs.values_list("name", flat=True) if n != "grpo-s32"
    )


@pytest.mark.parametrize(
    "query, message",
    [
        ("algorithm.objectiv = m2po", "unknown field 'algorithm.objectiv'; did you mean 'algorithm.objective'?"),
        ("staleness.k >=", "the query ends too early"),
        ("staleness.k 64", "expected an operator"),
        ("state = queued or state = running", "expected 'and' before 'or'"),
        ("state in (queued", "the query ends too early"),
        ("config; drop table = 1", "unknown field 'config;'"),
        ("staleness.k >= banana", "staleness.k is a number: compare it with a number (or null), got 'banana'"),
        ("algorithm.lr = true", "algorithm.lr is a number: compare it with a number (or null), got True"),
        ("staleness.k in (4, eight)", "staleness.k is a number: compare it with a number (or null), got 'eight'"),
    ],
)
def test_bad_queries_say_why(query, message):
    with pytest.raises(QueryError, match=re.escape(message)):
        parse_query(query)


def test_page_filters_sorts_and_shows_metrics(client, alice, sweep):
    from orchestrator.metrics.services import metrics_ingest

    run = sweep.runs.get(name="m2po-s512")
    metrics_ingest(
        run=run,
        attempt=1,
        points=[
            {"key": "train/reward_mean", "step": s, "value": v, "time": 1.0 + s} for s, v in ((1, 0.25), (2, 0.625))
        ],
    )
    client.force_login(alice)
    html = client.get("/", {"q": "algorithm.objective = m2po and staleness.k >= 64", "sort": "name"}).content.decode()
    assert html.index("m2po-s128") < html.index("m2po-s512")
    assert "grpo-s0" not in html
    assert "2 runs" in html
    assert '<td class="num">0.625</td>' in html  # the latest value of a key metric


def test_htmx_request_gets_only_the_table(client, alice, sweep):
    client.force_login(alice)
    response = client.get("/", {"state": "queued"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert "<table" in html and "<html" not in html and "8 runs" in html


def test_bad_query_is_shown_not_crashed(client, alice, sweep):
    client.force_login(alice)
    html = client.get("/", {"q": "nope = 1"}).content.decode()
    assert "unknown field &#x27;nope&#x27;" in html and "0 runs" in html


def test_outsider_sees_no_runs(client, charlie, sweep):
    client.force_login(charlie)
    assert "0 runs" in client.get("/").content.decode()


def test_runs_table_queries_are_fixed(client, alice, tiny_config, django_assert_num_queries):
    client.force_login(alice)
    experiment_create(
        owner=alice, name="a", project="lab", config=tiny_config, sweep={"train.steps": list(range(1, 31))}
    )
    # session, user, count, the page of runs (with experiment, project, owner), their tags,
    # latest key metrics, the values runs set in their own summaries, active runs per user, per
    # project, the queued runs' order (why and where queued runs wait)
    with django_assert_num_queries(10):
        client.get("/", HTTP_HX_REQUEST="true")


def test_api_run_list_queries_are_fixed(alice, api_client, tiny_config, django_assert_num_queries):
    experiment_create(
        owner=alice, name="a", project="lab", config=tiny_config, sweep={"train.steps": list(range(1, 31))}
    )
    client = api_client(alice)
    # token lookup, its last-used time, count, the page of runs, their tags, their metric summaries,
    # the values they set in their own summaries
    with django_assert_num_queries(7):
        assert len(client.get("/api/v1/runs").json()["runs"]) == 30


def test_cancel_from_the_table_returns_the_row(client, alice, bob, sweep):
    run = sweep.runs.order_by("id").first()
    sweep.project.members.add(bob)
    client.force_login(bob)
    assert client.post(f"/runs/{run.pk}/cancel", HTTP_HX_REQUEST="true").status_code == 403
    client.force_login(alice)
    response = client.post(f"/runs/{run.pk}/cancel", HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert f'id="run-row-{run.pk}"' in response.content.decode() and "cancelled" in response.content.decode()
    assert Run.objects.get(pk=run.pk).state == "cancelled"


def test_retry_and_move_to_top_from_the_run_page(client, alice, sweep):
    client.force_login(alice)
    run = sweep.runs.order_by("id").first()
    run_transition(run=run, to=Run.State.SUBMITTED)
    run_transition(run=run, to=Run.State.FAILED, reason="exit 1")
    response = client.post(f"/runs/{run.pk}/retry", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="run-facts")
    assert 'id="run-facts"' in response.content.decode()
    assert Run.objects.get(pk=run.pk).state == "queued"
    last = sweep.runs.order_by("-id").first()
    client.post(f"/runs/{last.pk}/top")
    assert Run.objects.get(pk=last.pk).moved_to_top_at is not None


def test_tags_and_notes_on_own_runs_only(client, alice, bob, sweep):
    run = sweep.runs.order_by("id").first()
    client.force_login(alice)
    client.post(f"/runs/{run.pk}/annotate", {"tags": "keep, paper", "notes": "looks good"})
    run.refresh_from_db()
    assert sorted(t.name for t in run.tags.all()) == ["keep", "paper"] and run.notes == "looks good"
    sweep.project.members.add(bob)
    client.force_login(bob)
    assert client.post(f"/runs/{run.pk}/annotate", {"tags": "", "notes": "mine"}).status_code == 403


def test_sweep_page_pause_resume_cancel(client, alice, sweep):
    client.force_login(alice)
    client.post(f"/experiments/{sweep.pk}/pause")
    sweep.refresh_from_db()
    assert sweep.state == "paused"
    client.post(f"/experiments/{sweep.pk}/resume")
    sweep.refresh_from_db()
    assert sweep.state == "active"
    client.post(f"/experiments/{sweep.pk}/cancel")
    assert set(sweep.runs.values_list("state", flat=True)) == {"cancelled"}


def test_run_config_download_is_a_trainer_file(client, alice, sweep):
    import yaml

    from trainer.config import parse_config

    client.force_login(alice)
    run = sweep.runs.get(name="m2po-s128")
    data = yaml.safe_load(client.get(f"/runs/{run.pk}/config.yaml").content)
    assert parse_config(data).staleness.k == 64


def test_projects_page_create_and_invite(client, alice, bob, charlie):
    client.force_login(alice)
    client.post("/projects/new", {"name": "rl-lab", "description": "stale runs"})
    client.post("/projects/rl-lab/members", {"username": "bob"})
    html = client.get("/projects/").content.decode()
    assert "rl-lab" in html and "alice (owner)" in html and "bob (invited: member)" in html
    invited = Client()
    invited.force_login(bob)
    assert "alice invites you to" in invited.get("/projects/").content.decode()
    invited.post("/projects/rl-lab/invitation/accept")
    assert "bob (member)" in client.get("/projects/").content.decode()
    client.post("/projects/new", {"name": "bad name"})
    client.force_login(charlie)
    assert client.post("/projects/rl-lab/members", {"username": "charlie"}).status_code == 404
    assert "rl-lab" not in client.get("/projects/").content.decode()


def test_api_tokens_page_creates_shows_once_and_revokes(client, alice, bob):
    from orchestrator.accounts.models import ApiToken

    client.force_login(alice)
    html = client.post("/account/tokens/", {"name": "laptop"}).content.decode()
    token = html.split('id="new-token">')[1].split("<")[0]
    assert token.startswith("opl_")
    from django.test import Client

    assert Client(HTTP_AUTHORIZATION=f"Bearer {token}").get("/api/v1/runs").status_code == 200
    assert token not in client.get("/account/tokens/").content.decode()
    mine = ApiToken.objects.get(user=alice)
    client.force_login(bob)
    client.post(f"/account/tokens/{mine.pk}/delete")
    assert ApiToken.objects.filter(pk=mine.pk).exists()  # not bob's to revoke
    client.force_login(alice)
    client.post(f"/account/tokens/{mine.pk}/delete")
    assert not ApiToken.objects.filter(pk=mine.pk).exists()


def test_outsiders_get_404_everywhere(client, charlie, sweep):
    run = sweep.runs.order_by("id").first()
    client.force_login(charlie)
    for url in (f"/runs/{run.pk}/", f"/runs/{run.pk}/config.yaml", f"/experiments/{sweep.pk}/"):
        assert client.get(url).status_code == 404, url
    for url in (
        f"/runs/{run.pk}/cancel",
        f"/runs/{run.pk}/retry",
        f"/runs/{run.pk}/top",
        f"/runs/{run.pk}/priority",
        f"/runs/{run.pk}/annotate",
        f"/experiments/{sweep.pk}/pause",
        f"/experiments/{sweep.pk}/cancel",
        f"/experiments/{sweep.pk}/priority",
    ):
        assert client.post(url, {"priority": "1"}).status_code == 404, url
    assert set(sweep.runs.values_list("state", flat=True)) == {"queued"}


def test_members_cannot_change_a_sweep_they_do_not_own(client, bob, sweep):
    sweep.project.members.add(bob)
    client.force_login(bob)
    assert client.get(f"/experiments/{sweep.pk}/").status_code == 200
    assert client.post(f"/experiments/{sweep.pk}/pause").status_code == 403
    sweep.refresh_from_db()
    assert sweep.state == "active"


def test_pages_of_fifty_keep_the_filter_and_sort(client, alice, tiny_config):
    experiment_create(
        owner=alice, name="a", project="lab", config=tiny_config, sweep={"train.steps": list(range(1, 61))}
    )
    client.force_login(alice)
    html = client.get("/", {"q": "train.steps >= 3", "sort": "name"}, HTTP_HX_REQUEST="true").content.decode()
    assert "58 runs" in html and "page 1 of 2" in html
    assert 'href="?q=train.steps+%3E%3D+3&sort=name&page=2"' in html
    page2 = client.get(
        "/", {"q": "train.steps >= 3", "sort": "name", "page": 2}, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert page2.count('class="compare-box"') == 8
