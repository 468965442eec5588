"""Run summaries in the runs API (detail and list) and in the filter language."""

import pytest

from orchestrator.experiments.models import Run
from orchestrator.metrics.services import metrics_ingest
from orchestrator.web.runquery import QueryError, parse_query
from tests.unit.metrics.helpers import make_run, points

pytestmark = pytest.mark.django_db
KEY = "train/reward_mean"


@pytest.fixture
def three_runs(alice, tiny_config):
    """low: reward 0.1 flat; high: rises 0 -> 1 (tail ~0.95); nan: last value NaN, acc only."""
    low, _ = make_run(alice, tiny_config, name="low")
    high, _ = make_run(alice, tiny_config, name="high")
    nan, _ = make_run(alice, tiny_config, name="nan")
    metrics_ingest(run=low, attempt=1, points=points(KEY, range(101), value=lambda s: 0.1))
    metrics_ingest(run=high, attempt=1, points=points(KEY, range(101), value=lambda s: s / 100))
    metrics_ingest(
        run=nan, attempt=1, points=points("eval/avg_acc", range(11), value=lambda s: "NaN" if s == 10 else 0.9)
    )
    return low, high, nan


def names(query):
    return sorted(Run.objects.filter(parse_query(query)).values_list("name", flat=True))


def test_run_detail_has_every_keys_summary(api_client, alice, three_runs):
    _, high, nan = three_runs
    got = api_client(alice).get(f"/api/v1/runs/{high.pk}").json()["summary"]
    assert list(got) == [KEY]
    assert got[KEY]["last"] == 1.0 and got[KEY]["count"] == 101 and got[KEY]["last_step"] == 100
    assert got[KEY]["tail_mean"] == pytest.approx(sum(range(90, 101)) / 1100)
    acc = api_client(alice).get(f"/api/v1/runs/{nan.pk}").json()["summary"]["eval/avg_acc"]
    assert acc["last"] == "NaN" and acc["min"] == acc["max"] == 0.9  # JSON-safe, extremes over finite values


def test_runs_list_has_summaries_limited_to_asked_keys(api_client, alice, three_runs):
    client = api_client(alice)
    runs = client.get("/api/v1/runs", {"summary_keys": f"{KEY},actor/m2"}).json()["runs"]
    assert {r["name"]: sorted(r["summary"]) for r in runs} == {"low": [KEY], "high": [KEY], "nan": []}
    assert client.get("/api/v1/runs", {"summary_keys": "bad\tkey"}).json()["errors"][0]["field"] == "summary_keys"


def test_filter_on_the_tail_mean_and_on_other_summary_fields(three_runs):
    assert names(f"summary.{KEY} > 0.5") == ["high"]  # the tail mean (last 10%)
    assert names(f"summary.{KEY}.min >= 0.1") == ["low"]
    assert names(f"summary.{KEY}.last <= 0.1 and name ~ lo") == ["low"]
    assert names("summary.eval/avg_acc.last > 0") == []  # a NaN last value passes no comparison
    assert names("summary.eval/avg_acc.count = 11") == ["nan"]
    assert names(f"summary.{KEY} != 0.1") == ["high", "nan"]


def test_the_filter_follows_new_points(alice, three_runs):
    low = three_runs[0]
    assert names(f"summary.{KEY} > 0.5") == ["high"]
    metrics_ingest(run=low, attempt=1, points=points(KEY, range(101, 1001), value=lambda s: 0.9))
    assert names(f"summary.{KEY} > 0.5") == ["high", "low"]


@pytest.mark.parametrize(
    "query,words",
    [
        ("summary.train/reward_mean ~ 0.5", "expected a comparison"),
        ("summary.train/reward_mean > high", "compare with a number"),
        ('summary.train/reward_mean > "0.5"', "compare with a number"),
        ("summary.bad\x07key > 1", "expected summary.<metric key>"),
        ("summary. > 1", "expected summary.<metric key>"),
    ],
)
def test_bad_summary_clauses_name_the_field(query, words):
    with pytest.raises(QueryError, match=words):
        parse_query(query)
