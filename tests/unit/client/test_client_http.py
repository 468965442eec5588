"""`Client`'s calls over the client's one HTTP client (opl_client.http), against a stdlib server:
one kept-alive connection for many calls, the query as urllib encoded it, GET following redirects
(the token kept for the same host only), other methods not, and the server's error message, or the
status's reason, in OplError."""

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from opl_client import Client, OplError


class _Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def _answer(self, status: int, body: bytes, kind: str = "application/json", **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _handle(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        seen = {"method": self.command, "path": self.path, "auth": self.headers.get("Authorization")}
        self.server.seen.append({**seen, "peer": self.client_address, "body": body})  # type: ignore[attr-defined]
        port = self.server.server_address[1]
        if self.path == "/api/v1/moved":
            self._answer(302, b"", Location="/api/v1/echo?moved=1")
        elif self.path == "/api/v1/elsewhere":
            self._answer(302, b"", Location=f"http://localhost:{port}/api/v1/echo")
        elif self.path == "/api/v1/post-moved":
            self._answer(307, b"", Location=f"https://lab.example.org{self.path}")
        elif self.path == "/api/v1/missing":
            errors = [{"field": "key", "message": "unknown"}]
            self._answer(404, json.dumps({"error": "no such key: x", "errors": errors}).encode())
        elif self.path == "/api/v1/proxy-down":
            self._answer(502, b"<html>bad gateway</html>", "text/html")
        else:
            self._answer(200, json.dumps(seen).encode())

    do_GET = do_POST = do_PATCH = do_DELETE = _handle


@contextmanager
def api() -> Iterator[tuple[str, list]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.seen  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def test_calls_share_one_kept_alive_connection_and_encode_the_query_as_before():
    with api() as (url, seen), Client(url, "opl_personal") as lab:
        lab.request("GET", "/api/v1/echo", [("key", "a/b"), ("key", "c d"), ("max_points", 5)])
        lab.request("POST", "/api/v1/echo", body={"name": "x"})
        lab.request("PATCH", "/api/v1/echo", body={"name": "y"}, token="oplrun_run")
    assert [s["path"] for s in seen] == ["/api/v1/echo?key=a%2Fb&key=c+d&max_points=5", "/api/v1/echo", "/api/v1/echo"]
    assert [json.loads(s["body"]) if s["body"] else None for s in seen] == [None, {"name": "x"}, {"name": "y"}]
    assert [s["auth"] for s in seen] == ["Bearer opl_personal", "Bearer opl_personal", "Bearer oplrun_run"]
    assert len({s["peer"] for s in seen}) == 1


def test_get_follows_redirects_and_keeps_the_token_for_the_same_host_only():
    with api() as (url, seen), Client(url, "opl_personal") as lab:
        assert lab.request("GET", "/api/v1/moved")["path"] == "/api/v1/echo?moved=1"
        assert lab.request("GET", "/api/v1/elsewhere") == {"method": "GET", "path": "/api/v1/echo", "auth": None}
    assert [s["auth"] for s in seen] == ["Bearer opl_personal"] * 3 + [None]


def test_a_post_is_not_redirected_and_errors_carry_the_servers_message():
    with api() as (url, _), Client(url, "t") as lab:
        with pytest.raises(OplError) as moved:
            lab.request("POST", "/api/v1/post-moved", body={})
        assert moved.value.status == 307
        assert str(moved.value) == "HTTP 307: Temporary Redirect (to https://lab.example.org/api/v1/post-moved)"
        with pytest.raises(OplError) as missing:
            lab.request("GET", "/api/v1/missing")
        assert (missing.value.status, missing.value.message) == (404, "no such key: x")
        assert str(missing.value) == "HTTP 404: no such key: x (key: unknown)"
        with pytest.raises(OplError, match=r"^HTTP 502: Bad Gateway$"):
            lab.request("GET", "/api/v1/proxy-down")
