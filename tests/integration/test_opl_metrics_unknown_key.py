"""`opl metrics RUN train/nope` against a live server names the run's known keys once."""

import pytest

from opl_client import cli
from orchestrator.accounts.services import api_token_create
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import make_run, points

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_an_unknown_key_lists_the_known_keys_once(live_server, alice, tiny_config, capsys):
    run, _ = make_run(alice, tiny_config)
    metrics_ingest(run=run, attempt=1, points=points("train/reward_mean", range(3)) + points("actor/m2", range(3)))
    token = api_token_create(user=alice, name="cli")

    code = cli.main(["--url", live_server.url, "--token", token, "metrics", str(run.pk), "train/nope"])

    err = capsys.readouterr().err
    assert code == 1
    assert err.count("known keys:") == 1 and err.count("train/reward_mean") == 1, err
    assert err.startswith(f"opl: HTTP 404: run {run.pk} has no metric 'train/nope'"), err
