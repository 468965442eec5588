"""The app served as docs/OPERATIONS.md deploys it, for a benchmark: uvicorn in its own process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.faults.stack import free_port

ROOT = Path(__file__).resolve().parents[1]


def start_uvicorn(workers: int = 1, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """uvicorn serving orchestrator.asgi on a free port, with DATABASE_POOL on unless the environment
    says otherwise; `env` is added to this process's environment. Returns once /login/ answers."""
    import httpx

    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "orchestrator.asgi:application", "--port", str(port)]
    argv += ["--workers", str(workers), "--log-level", "warning", "--no-access-log"]
    environ = {**os.environ, "DATABASE_POOL": os.environ.get("DATABASE_POOL", "1"), **(env or {})}
    server = subprocess.Popen(argv, cwd=ROOT, env=environ)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"{base}/login/", timeout=1)
            return server, base
        except httpx.HTTPError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError(f"uvicorn did not answer on {base}") from None
            time.sleep(0.1)
