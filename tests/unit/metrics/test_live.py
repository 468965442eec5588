"""The live stream through the real ASGI server: new points only, in order, resumable."""

import threading

import httpx
import pytest

from .asgi_server import read_events, serve_asgi, session_cookie
from .helpers import make_run, points, push

KEY = "train/reward_mean"


@pytest.fixture
def server(transactional_db):
    with serve_asgi() as url:
        yield url


def post_later(client, run, token, bodies, delay=0.5):
    """Post batches from another thread once the stream is listening."""

    def work():
        import time

        time.sleep(delay)
        for body in bodies:
            assert push(client, run.pk, token, body).status_code == 202

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def test_stream_sends_new_batches_in_order_then_resumes_without_gaps_or_duplicates(server, client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    client.force_login(alice)
    cookies = session_cookie(client)
    url = f"{server}/api/v1/runs/{run.pk}/metrics/stream"
    assert push(client, run.pk, token, {"points": points(KEY, [0])}).status_code == 202  # seq 1, before

    with httpx.stream("GET", url, params={"after": 1, "keys": KEY}, cookies=cookies, timeout=15) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        poster = post_later(
            client,
            run,
            token,
            [
                {"points": points(KEY, [1, 2])},
                {"points": points("actor/m2", [1])},  # not a charted key: no event
                {"points": points(KEY, [3]) + points("actor/m2", [2])},
            ],
        )
        events = read_events(response, 2)
        poster.join()
    assert [(e[0], e[1]) for e in events] == [("2", "points"), ("4", "points")]
    assert events[0][2]["points"] == {KEY: [[1, 0.1], [2, 0.2]]}
    assert events[1][2]["points"] == {KEY: [[3, 0.3]]}

    # the browser reconnects after event 2: it gets 4 from the database, then 5 live, nothing twice
    headers = {"Last-Event-ID": "2"}
    with httpx.stream("GET", url, headers=headers, cookies=cookies, timeout=15) as response:
        poster = post_later(client, run, token, [{"points": points(KEY, [4], value=lambda s: "NaN")}])
        events = read_events(response, 3)
        poster.join()
    assert [e[0] for e in events] == ["3", "4", "5"]
    assert events[2][2]["points"] == {KEY: [[4, "NaN"]]}


def test_a_restart_tells_the_client_to_reload(server, client, alice, tiny_config):
    from .helpers import start_attempt

    run, token = make_run(alice, tiny_config)
    push(client, run.pk, token, {"points": points(KEY, range(5))})
    run, token2 = start_attempt(run, 2)
    client.force_login(alice)
    with httpx.stream(
        "GET",
        f"{server}/api/v1/runs/{run.pk}/metrics/stream",
        params={"after": 1},
        cookies=session_cookie(client),
        timeout=15,
    ) as response:
        poster = post_later(client, run, token2, [{"attempt": 2, "points": points(KEY, [3])}])
        events = read_events(response, 1)
        poster.join()
    assert events[0][1] == "reset" and events[0][0] == "2"


def test_stream_requires_a_login_and_access(server, client, api_client, alice, charlie, tiny_config):
    run, _ = make_run(alice, tiny_config)
    url = f"{server}/api/v1/runs/{run.pk}/metrics/stream"
    assert httpx.get(url, timeout=10).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer nope"}, timeout=10).status_code == 401
    client.force_login(charlie)
    assert httpx.get(url, cookies=session_cookie(client), timeout=10).status_code == 404
    token = api_client(alice).defaults["HTTP_AUTHORIZATION"]  # a personal API token works too
    with httpx.stream("GET", url, headers={"Authorization": token}, timeout=10) as response:
        assert response.status_code == 200 and next(response.iter_lines()) == "retry: 2000"


@pytest.mark.django_db
def test_without_asgi_the_stream_answers_what_is_new_and_asks_to_reconnect(client, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    for steps in ([0], [1, 2]):
        push(client, run.pk, token, {"points": points(KEY, steps)})
    client.force_login(alice)
    response = client.get(f"/api/v1/runs/{run.pk}/metrics/stream", HTTP_LAST_EVENT_ID="1")
    body = response.content.decode()
    assert response["Content-Type"].startswith("text/event-stream")
    assert body.startswith("retry: 2000") and "id: 2\nevent: points" in body and "id: 1\n" not in body
