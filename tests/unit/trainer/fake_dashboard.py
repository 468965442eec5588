"""A real HTTP server on 127.0.0.1 that records what the trainer posts (for reporting tests)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Dashboard:
    def __init__(self, statuses: list[int] | None = None):
        self.requests: list[dict] = []
        self.statuses = list(statuses or [])
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    status = outer.statuses.pop(0) if outer.statuses else 200
                    outer.requests.append(
                        {"path": self.path, "auth": self.headers.get("Authorization"), "body": body, "status": status}
                    )
                self.send_response(status)
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
        self.server.shutdown()
        self.server.server_close()

    def accepted_points(self, path_suffix="/metrics") -> list[dict]:
        with self.lock:
            return [p for r in self.requests if r["path"].endswith(path_suffix) and r["status"] < 300 for p in r["body"]["points"]]
