"""A forward HTTP proxy for tests, as a cluster's egress proxy is to its nodes: it takes
absolute-URL requests (`POST http://host:port/path`), sends them on, and records what it saw.
`hosts` are names only the proxy resolves, as a dashboard's name may be known only beyond it."""

import http.client
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authorization", "proxy-connection", "transfer-encoding"}


class _Forward(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _forward(self) -> None:
        seen = self.server.seen  # type: ignore[attr-defined]
        seen.append((self.command, self.path, self.headers.get("Proxy-Authorization")))
        required = self.server.required_auth  # type: ignore[attr-defined]
        if required is not None and self.headers.get("Proxy-Authorization") != required:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(407)
            self.send_header("Proxy-Authenticate", 'Basic realm="lab"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        target = urllib.parse.urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        host = self.server.hosts.get(target.hostname, target.hostname)  # type: ignore[attr-defined]
        conn = http.client.HTTPConnection(host, target.port, timeout=60)
        try:
            conn.request(self.command, target.path + (f"?{target.query}" if target.query else ""), body, headers)
            answer = conn.getresponse()
            data = answer.read()
        finally:
            conn.close()
        self.send_response(answer.status)
        for k, v in answer.getheaders():
            if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _forward

    def log_message(self, *args) -> None:  # quiet
        pass


@contextmanager
def forward_proxy(hosts: dict[str, str] | None = None, required_auth: str | None = None) -> Iterator[tuple[str, list]]:
    """(the proxy's URL, the list of (method, absolute URL, Proxy-Authorization) it was sent); with
    required_auth, a request without that Proxy-Authorization gets 407."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Forward)
    server.seen = []  # type: ignore[attr-defined]
    server.hosts = dict(hosts or {})  # type: ignore[attr-defined]
    server.required_auth = required_auth  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.seen  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
