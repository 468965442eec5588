"""A small keep-alive HTTP client over the standard library, for the background pusher: one
connection reused across posts, opened again after any error. The answer looks like httpx's
(status_code, text, headers.get) so the pusher reads it the same way."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from dataclasses import dataclass, field


class Headers(dict):
    """Answer headers, read by any case of their name."""

    def get(self, name: str, default=None):
        return super().get(name.lower(), default)


@dataclass
class Answer:
    status_code: int
    content: bytes = b""
    headers: Headers = field(default_factory=Headers)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.content or b"null")


class HttpClient:
    def __init__(self, headers: dict[str, str] | None = None, timeout: float = 10.0):
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self._origin: tuple[str, str, int | None] | None = None
        self._lock = threading.Lock()

    def post(
        self,
        url: str,
        *,
        content: bytes | None = None,
        json: object = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Answer:
        body = content
        sent = {**self.headers, **(headers or {})}
        if json is not None:
            body = _json_bytes(json)
            sent.setdefault("Content-Type", "application/json")
        return self.request("POST", url, body=body, headers=sent, timeout=timeout)

    def request(
        self, method: str, url: str, *, body: bytes | None = None, headers: dict[str, str], timeout: float | None = None
    ) -> Answer:
        parts = urllib.parse.urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        with self._lock:
            conn = self._connection(parts, self.timeout if timeout is None else timeout)
            try:
                conn.request(method, path or "/", body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except Exception:
                self._drop()
                raise
            answer = Answer(resp.status, data, Headers((k.lower(), v) for k, v in resp.getheaders()))
            if resp.will_close:
                self._drop()
            return answer

    def _connection(self, parts: urllib.parse.SplitResult, timeout: float) -> http.client.HTTPConnection:
        origin = (parts.scheme, parts.hostname or "", parts.port)
        if self._conn is None or origin != self._origin:
            self._drop()
            cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            self._conn, self._origin = cls(parts.hostname, parts.port, timeout=timeout), origin
        self._conn.timeout = timeout
        if self._conn.sock is not None:
            self._conn.sock.settimeout(timeout)
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()


def _json_bytes(value: object) -> bytes:
    return json.dumps(value).encode()
