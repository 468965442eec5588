"""`opl import PATH`: an existing history becomes a run. The history is written as an SDK spool in
a folder of its own (OPL_IMPORT_CACHE, default ~/.cache/opl/imports/<id>) and uploaded as `opl sync`
does. The run's client id comes from the source's path, format, project and name, so importing the
same source again finds the same run; a history that only grew since sends only its new points."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

import yaml

from opl_client.client import Client
from opl_client.importers.readers import READERS, HistoryError, guess_format
from opl_client.sdk import RUN_FILE, safe_name
from opl_client.spool import SPOOL_NAME, MetricSpool, atomic_write_text, read_offset, rejected_name, write_offset
from opl_client.sync import Synced, sync_dir


def cache_root() -> Path:
    return Path(os.environ.get("OPL_IMPORT_CACHE") or Path.home() / ".cache" / "opl" / "imports")


def import_history(
    path: str | Path,
    client: Client,
    *,
    format: str | None = None,
    project: str | None = None,
    name: str | None = None,
    group: str | None = None,
    config_file: str | Path | None = None,
    tags: list[str] | None = None,
) -> Synced:
    path = Path(path).resolve()
    if not path.exists():
        raise HistoryError(f"{path}: no such file or folder")
    fmt = format or guess_format(path)
    if fmt not in READERS:
        raise HistoryError(f"--format: one of {', '.join(READERS)}, got {fmt!r}")
    history = READERS[fmt](path)
    if not history.points:
        raise HistoryError(f"{path}: no numeric metrics in it ({fmt})")
    config = dict(history.config)
    if config_file:
        loaded = yaml.safe_load(Path(config_file).read_text())
        if not isinstance(loaded, dict):
            raise HistoryError(f"--config {config_file}: a YAML or JSON mapping expected")
        config.update(loaded)
    name = name or _name(path)
    client_id = "import-" + hashlib.sha256(f"{fmt}\0{path}\0{project}\0{name}".encode()).hexdigest()[:40]
    run_dir = cache_root() / client_id
    run_dir.mkdir(parents=True, exist_ok=True)
    meta = _meta(run_dir)
    meta.update(
        client_id=client_id,
        project=project,
        name=name,
        group=group,
        config=config,
        tags=list(tags or []),
        notes=f"imported from {fmt} history {path}",
        heartbeat_timeout_s=600,
        exit_code=0,
    )
    meta.setdefault("imported_at", time.time())
    _write_spool(run_dir, history.deduplicated(), meta["imported_at"])
    atomic_write_text(run_dir / RUN_FILE, json.dumps(meta, indent=1))
    return sync_dir(run_dir, client, fail_on_refused=True)


def _meta(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / RUN_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _name(path: Path) -> str:
    return safe_name(path.name if path.is_dir() else path.name.split(".")[0] or path.stem, "imported")


def _write_spool(run_dir: Path, points, default_time: float) -> None:
    """The spool of these points; what the dashboard already acknowledged stays acknowledged when
    the new spool starts with the old one (the source only grew)."""
    with tempfile.TemporaryDirectory(dir=run_dir) as tmp:
        spool = MetricSpool(Path(tmp))
        for step, key, value, when in points:
            spool.log(step, {key: value}, now=when if when is not None else default_time)
        spool.close()
        new = (Path(tmp) / SPOOL_NAME).read_bytes()
    old_path = run_dir / SPOOL_NAME
    old = old_path.read_bytes() if old_path.exists() else b""
    acknowledged = read_offset(run_dir)[0]
    atomic_write_text(old_path, new.decode("utf-8"))
    if not new.startswith(old) or acknowledged > len(new):
        write_offset(run_dir, 0, 1)  # the source changed under us: send it all again (idempotent)
        (run_dir / rejected_name(SPOOL_NAME)).unlink(missing_ok=True)
