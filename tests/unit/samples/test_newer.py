"""A live run's samples card notices newer steps without moving the reader: it polls a tiny
endpoint while the run is not over, which answers a hint with a button (never a reload of the
card), keeps the reader's choices in that button, and stops the polling once the run is over."""

import re

import pytest

from orchestrator.experiments.models import Run
from tests.unit.metrics.helpers import make_run

from .helpers import sample
from .test_views import ingest

pytestmark = pytest.mark.django_db


def poll_url(html: str) -> str:
    found = re.search(r'id="samples-newer"[^>]*hx-get="([^"]+)" hx-trigger="every 10s"', html)
    assert found, html[:3000]
    return found.group(1).replace("&amp;", "&")


def test_a_running_runs_card_polls_for_newer_steps_and_offers_them(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    ingest(run, [sample(2, 0), sample(4, 0), sample(4, 1, kind="eval")])
    client.force_login(alice)
    card = client.get(f"/runs/{run.pk}/samples/", {"step": "2", "verdict": "wrong", "sort": "masked"}).content.decode()
    url = poll_url(card)
    assert (
        url.startswith(f"/runs/{run.pk}/samples/newer/?") and "kind=train" in url and "after=4" in url
    )  # the newest known
    assert "verdict=wrong" in url and "sort=masked" in url

    quiet = client.get(url).content.decode()
    assert 'data-newer="0"' in quiet and "<button" not in quiet and 'hx-trigger="every 10s"' in quiet

    ingest(run, [sample(6, 0), sample(8, 0), sample(8, 1), sample(9, 0, kind="eval")])
    hint = client.get(url).content.decode()
    assert 'data-newer="2"' in hint and "2 newer steps recorded — show newest" in hint
    show = re.search(r'data-show-newest hx-get="([^"]+)" hx-target="#run-samples"', hint).group(1).replace("&amp;", "&")
    assert "step=" not in show and "verdict=wrong" in show and "sort=masked" in show  # the newest step, same choices
    assert 'hx-trigger="every 10s"' in hint  # still watching: the count grows while the reader reads
    reloaded = client.get(show).content.decode()
    assert '<option value="8" selected>' in reloaded and "after=8" in poll_url(reloaded)

    run.state = Run.State.SUCCEEDED
    run.save(update_fields=["state"])
    final = client.get(url).content.decode()
    assert "2 newer steps recorded" in final and "hx-trigger" not in final  # the polling stops with the run
    assert 'id="samples-newer"' not in client.get(f"/runs/{run.pk}/samples/").content.decode()


def test_an_empty_card_of_a_live_run_watches_every_kind(client, alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    client.force_login(alice)
    url = poll_url(client.get(f"/runs/{run.pk}/samples/").content.decode())
    assert "kind=&" in url and url.endswith("after=")
    ingest(run, [sample(3, 0, kind="eval")])
    hint = client.get(url).content.decode()
    assert "1 step recorded — show" in hint and "newer step" not in hint


@pytest.mark.parametrize(
    "params,field", [({"after": "x"}, "after"), ({"kind": "both"}, "kind"), ({"sort": "?"}, "sort")]
)
def test_a_bad_poll_parameter_is_a_400_naming_it(client, alice, charlie, tiny_config, params, field):
    run, _ = make_run(alice, tiny_config)
    client.force_login(alice)
    answer = client.get(f"/runs/{run.pk}/samples/newer/", params)
    assert answer.status_code == 400 and answer.content.decode().startswith(f"{field}:")
    client.force_login(charlie)
    assert client.get(f"/runs/{run.pk}/samples/newer/").status_code == 404
