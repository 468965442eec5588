"""Replaying recorded slurmrestd exchanges through httpx.MockTransport."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import httpx

from orchestrator.cluster.slurm.auth import SlurmCredentials
from orchestrator.cluster.slurm.client import SlurmClient

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
FAMILIES = {
    "v0.0.38-slurm-22.05": "v0.0.38",
    "v0.0.42-slurm-24.11": "v0.0.42",
}


def sample(family: str, name: str) -> dict:
    return json.loads((FIXTURES / family / f"{name}.json").read_text())


def sample_names(family: str) -> list[str]:
    return sorted(p.stem for p in (FIXTURES / family).glob("[0-9]*.json"))


def _without_version(path: str) -> str:
    return re.sub(r"/v0\.0\.\d+", "/vX", path).rstrip("/")


class Replay:
    """A transport answering each request with one recorded response, after checking the
    request is the recorded one (method, path modulo API version, auth headers)."""

    def __init__(self, family: str, *names: str, any_path: bool = False):
        self.family = family
        self.queue = [sample(family, n) for n in names]
        self.any_path = any_path
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.url.path == "/openapi/v3":
            doc = gzip.decompress((FIXTURES / self.family / "openapi-v3.json.gz").read_bytes())
            return httpx.Response(200, content=doc, headers={"content-type": "application/json"})
        assert self.queue, f"unexpected request {request.method} {request.url}"
        recorded = self.queue.pop(0)
        want = recorded["request"]
        if not self.any_path:
            assert request.method == want["method"]
            got_path = request.url.path + (f"?{request.url.query.decode()}" if request.url.query else "")
            assert _without_version(got_path) == _without_version(want["path"]), (got_path, want["path"])
        assert request.headers["X-SLURM-USER-NAME"]
        resp = recorded["response"]
        body = resp["body"]
        if isinstance(body, str):
            return httpx.Response(resp["status"], text=body, headers={"content-type": "text/plain"})
        return httpx.Response(resp["status"], json=body)


def replay_client(
    family: str, *names: str, any_path: bool = False, token: str = "t.t.t", api_version: str | None = None
) -> tuple[SlurmClient, Replay]:
    replay = Replay(family, *names, any_path=any_path)
    client = SlurmClient(
        "http://slurm.test:6820",
        SlurmCredentials("slurmtest", token=token),
        api_version=api_version or FAMILIES[family],
        transport=httpx.MockTransport(replay),
        connect_retries=0,
    )
    return client, replay
