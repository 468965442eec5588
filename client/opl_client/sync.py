"""`opl sync DIR`: upload the spool of a run logged offline (or whose dashboard was down at its
end). The run is opened again by the client id in DIR/run.json, so a second sync adds nothing; the
pusher sends only what the dashboard never acknowledged, and marks the run finished when the spool
says it ended."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from opl_client.client import Client
from opl_client.pusher import Pusher, PushSettings
from opl_client.sdk import RUN_FILE, _body, pending_bytes
from opl_client.spool import atomic_write_text


@dataclass
class Synced:
    dir: Path
    run_id: int
    url: str
    left_bytes: int
    finished: bool
    lost: int = 0  # metric points the dashboard refused for good
    refused: list = field(default_factory=list)  # (key, step, reason) of those, the first 10,000


def run_dirs(path: Path) -> list[Path]:
    """DIR itself when it holds run.json, else its sub-folders that do."""
    path = Path(path)
    if (path / RUN_FILE).is_file():
        return [path]
    found = sorted(p.parent for p in path.glob(f"*/{RUN_FILE}"))
    if not found:
        raise FileNotFoundError(f"{path}: no {RUN_FILE} in it or in its sub-folders (not an opl spool)")
    return found


def sync_dir(run_dir: Path, client: Client, *, timeout_s: float = 600.0, fail_on_refused: bool = False) -> Synced:
    """fail_on_refused: a run any of whose points the dashboard refused ends failed (an import that
    did not land whole), whatever exit code the spool holds."""
    run_dir = Path(run_dir)
    meta = json.loads((run_dir / RUN_FILE).read_text())
    answer = client.request("POST", "/api/v1/sdk/runs", body=_body(meta))
    meta.update(run_id=answer["id"], url=answer["url"])
    atomic_write_text(run_dir / RUN_FILE, json.dumps(meta, indent=1))
    settings = PushSettings(client.settings.url, str(answer["id"]), answer["token"], answer.get("attempt", 1))
    settings.flush_timeout_s = timeout_s
    pusher = Pusher(run_dir, settings, total_steps=0)
    pusher.close()  # pushes until the spools are acknowledged or time is up
    left = pending_bytes(run_dir)
    finished = False
    if left == 0 and "exit_code" in meta and not meta.get("finish_sent"):
        exit_code = 1 if fail_on_refused and pusher.lost_points else meta["exit_code"]
        client.request(
            "POST",
            f"/api/v1/sdk/runs/{answer['id']}/finish",
            body={"exit_code": exit_code},
            token=answer["token"],
        )
        meta["finish_sent"] = finished = True
        atomic_write_text(run_dir / RUN_FILE, json.dumps(meta, indent=1))
    return Synced(run_dir, answer["id"], answer["url"], left, finished, pusher.lost_points, pusher.refused_points)
