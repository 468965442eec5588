"""A real uvicorn serving the project's ASGI app on a free port, in a thread of the test process
(so it uses the test database). SSE needs the ASGI path: Django's live_server is WSGI."""

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn


@contextmanager
def serve_asgi(keep_alive_s: float = 5) -> Iterator[str]:
    """keep_alive_s: how long uvicorn keeps an idle connection open (its default, 5 s)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        "orchestrator.asgi:application",
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=1,
        timeout_keep_alive=keep_alive_s,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        _drop_other_connections()


def _drop_other_connections() -> None:
    """Connections the server's worker threads left open would block dropping the test database."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


def session_cookie(client) -> dict[str, str]:
    """The session cookie of a django.test.Client that called force_login."""
    return {"sessionid": client.cookies["sessionid"].value}


def read_events(response: httpx.Response, count: int) -> list[tuple[str, str, dict]]:
    """The next `count` SSE events (id, event, data) of a streaming response."""
    events, fields = [], {}
    for line in response.iter_lines():
        if line == "":
            if "data" in fields:
                events.append((fields.get("id"), fields.get("event"), json.loads(fields["data"])))
                if len(events) == count:
                    return events
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields[name] = value.lstrip(" ")
    return events
