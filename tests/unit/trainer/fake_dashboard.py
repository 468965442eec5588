"""A real HTTP server on 127.0.0.1 that records what the trainer posts (for reporting tests)."""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Dashboard:
    """statuses: the answers to the first requests (then 200); path_statuses: the same for the
    requests to paths ending in a given suffix ("/samples": [503, 503]); headers: extra answer
    headers; hold: while this event is unset, requests are read and then left waiting (a hung dashboard)."""

    def __init__(
        self,
        statuses: list[int] | None = None,
        headers: dict[str, str] | None = None,
        hold: threading.Event | None = None,
        path_statuses: dict[str, list[int]] | None = None,
    ):
        self.requests: list[dict] = []
        self.statuses = list(statuses or [])
        self.path_statuses = {k: list(v) for k, v in (path_statuses or {}).items()}
        self.headers = dict(headers or {})
        self.hold = hold
        self.arrived = threading.Semaphore(0)  # released once per request read
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                body = json.loads(raw)
                outer.arrived.release()
                if outer.hold is not None:
                    outer.hold.wait()
                with outer.lock:
                    own = next((v for k, v in outer.path_statuses.items() if self.path.endswith(k) and v), None)
                    status = own.pop(0) if own else outer.statuses.pop(0) if outer.statuses else 200
                    outer.requests.append(
                        {
                            "path": self.path,
                            "auth": self.headers.get("Authorization"),
                            "body": body,
                            "status": status,
                            "encoding": self.headers.get("Content-Encoding"),
                        }
                    )
                self.send_response(status)
                for name, value in outer.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()

    def accepted_points(self, path_suffix="/metrics") -> list[dict]:
        with self.lock:
            return [
                p
                for r in self.requests
                if r["path"].endswith(path_suffix) and r["status"] < 300
                for p in r["body"]["points"]
            ]
