"""The client's one HTTP client, over the standard library: one kept-alive connection reused across
requests, opened again after any error, for `Client`'s calls and the background pusher alike. The
answer looks like httpx's (status_code, text, json(), headers.get). Like urllib, httpx and curl it
goes through the proxy the environment names (HTTP_PROXY, HTTPS_PROXY, NO_PROXY): a cluster's nodes
often reach the dashboard only that way. GET and HEAD follow redirects, as urllib did for `opl`'s
calls; other methods return the 3xx answer."""

from __future__ import annotations

import base64
import http.client
import ipaddress
import json as jsonlib
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

# What a pooled connection the server closed while it was idle raises at the next request.
STALE_CONNECTION = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)
REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 10  # urllib's limit


class Headers(dict):
    """Answer headers, read by any case of their name."""

    def get(self, name: str, default=None):
        return super().get(name.lower(), default)


@dataclass
class Answer:
    status_code: int
    content: bytes = b""
    headers: Headers = field(default_factory=Headers)
    reason: str = ""

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self):
        return jsonlib.loads(self.content or b"null")


class HttpClient:
    """`headers` go with every request (a request's own win); `timeout` is each request's unless it
    names one. Thread-safe: requests take turns on the one connection."""

    def __init__(self, headers: dict[str, str] | None = None, timeout: float = 10.0):
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None
        self._origin: tuple[str, str, int | None] | None = None
        self._lock = threading.Lock()

    def post(self, url: str, **kwargs) -> Answer:
        return self.request("POST", url, **kwargs)

    def request(
        self,
        method: str,
        url: str,
        *,
        params: dict | list | None = None,
        content: bytes | None = None,
        json: object = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Answer:
        """`params`: the query, a dict or (name, value) pairs (a list value repeats its name);
        `json`: a body sent as JSON, else `content` as it is."""
        if params:
            url += ("&" if urllib.parse.urlsplit(url).query else "?") + urllib.parse.urlencode(params, doseq=True)
        body = content
        sent = {**self.headers, **(headers or {})}
        if json is not None:
            body = jsonlib.dumps(json).encode()
            sent.setdefault("Content-Type", "application/json")
        timeout = self.timeout if timeout is None else timeout
        answer = self._send(method, url, body, sent, timeout)
        if method not in ("GET", "HEAD"):
            return answer
        for _ in range(MAX_REDIRECTS):
            location = answer.headers.get("Location")
            if answer.status_code not in REDIRECTS or not location:
                return answer
            target = urllib.parse.urljoin(url, location)
            if urllib.parse.urlsplit(target).hostname != urllib.parse.urlsplit(url).hostname:
                sent = {k: v for k, v in sent.items() if k.lower() != "authorization"}  # no token for another host
            url = target
            answer = self._send(method, url, None, sent, timeout)
        return answer

    def _send(self, method: str, url: str, body: bytes | None, headers: dict[str, str], timeout: float) -> Answer:
        parts = urllib.parse.urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        proxy = proxy_for(parts)
        if proxy is not None and parts.scheme == "http":  # a plain-HTTP proxy takes the whole URL
            path = urllib.parse.urlunsplit(parts._replace(fragment=""))
            headers = {**headers, **_proxy_auth(proxy)}
        with self._lock:
            for tries_left in (1, 0):
                conn = self._connection(parts, proxy, timeout)
                reused = conn.sock is not None
                try:
                    conn.request(method, path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    break
                except Exception as exc:
                    self._drop()
                    # the server closed the kept-alive connection while it sat idle (uvicorn does after
                    # 5 s): nothing was processed, so the request goes again once on a new connection
                    if not (reused and tries_left and isinstance(exc, STALE_CONNECTION)):
                        raise
            answer = Answer(resp.status, data, Headers((k.lower(), v) for k, v in resp.getheaders()), resp.reason)
            if resp.will_close:
                self._drop()
            return answer

    def _connection(
        self, parts: urllib.parse.SplitResult, proxy: urllib.parse.SplitResult | None, timeout: float
    ) -> http.client.HTTPConnection:
        origin = (parts.scheme, parts.hostname or "", parts.port, proxy)
        if self._conn is None or origin != self._origin:
            self._drop()
            cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            if proxy is None:
                conn = cls(parts.hostname, parts.port, timeout=timeout)
            else:  # https: a CONNECT tunnel through the proxy, TLS with the dashboard inside it
                conn = cls(proxy.hostname, proxy.port or 80, timeout=timeout)
                if parts.scheme == "https":
                    conn.set_tunnel(parts.hostname, parts.port or 443, headers=_proxy_auth(proxy))
            self._conn, self._origin = conn, origin
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


def proxy_for(parts: urllib.parse.SplitResult) -> urllib.parse.SplitResult | None:
    """The proxy the environment names for this URL's scheme, or None: none named, NO_PROXY covers
    the host, or the host is this machine's loopback (which no proxy elsewhere can reach; a `make
    demo` beside a lab-wide HTTP_PROXY must still push). Read as urllib reads it; only http://
    proxies are spoken to."""
    proxy = urllib.request.getproxies().get(parts.scheme)
    host = parts.hostname or ""
    if not proxy or _loopback(host) or urllib.request.proxy_bypass(host):
        return None
    found = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if found.scheme != "http" or not found.hostname:
        name = f"{parts.scheme.upper()}_PROXY"
        raise ValueError(f"{name}={found.scheme}://{found.hostname}: only an http:// proxy is supported")
    return found


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _proxy_auth(proxy: urllib.parse.SplitResult) -> dict[str, str]:
    if proxy.username is None:
        return {}
    user = urllib.parse.unquote(proxy.username)
    password = urllib.parse.unquote(proxy.password or "")
    return {"Proxy-Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
