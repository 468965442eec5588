"""Run `python -m trainer` as the cluster job does, and read back its metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]


def write_config(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def trainer_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPL_")}
    env["PYTHONPATH"] = str(REPO)
    env["OMP_NUM_THREADS"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def trainer_cmd(config: Path, run_dir: Path, resume: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "trainer", "run", "--config", str(config), "--run-dir", str(run_dir)]
    return cmd + (["--resume"] if resume else [])


def run_trainer(
    config: Path, run_dir: Path, resume: bool = False, timeout: float = 300, **env
) -> subprocess.CompletedProcess:
    return subprocess.run(
        trainer_cmd(config, run_dir, resume),
        cwd=REPO,
        env=trainer_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_trainer(
    config: Path, run_dir: Path, resume: bool = False, own_group: bool = False, **env
) -> subprocess.Popen:
    return subprocess.Popen(
        trainer_cmd(config, run_dir, resume),
        cwd=REPO,
        env=trainer_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=own_group,
    )


def read_points(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def by_step(points: list[dict]) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for p in points:
        assert p["key"] not in out[p["step"]], f"duplicated point {p['key']} at step {p['step']}"
        out[p["step"]][p["key"]] = p["value"]
    return dict(out)
