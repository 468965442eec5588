"""The `opl` SDK's own logic, offline: W&B's step and commit rules, nested dicts as
"a/b" keys, the values it takes and skips, keys the dashboard would refuse dropped with a warning,
samples checked against docs/SAMPLES.md, and a spool folder that holds no secret."""

import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import opl_client.sdk as sdk
from opl_client.sync import run_dirs

REPO = Path(__file__).resolve().parents[2]


def points(run: sdk.Run) -> list[tuple[int, str, float]]:
    lines = (run.dir / "metrics.jsonl").read_text().splitlines()
    return [(p["step"], p["key"], p["value"]) for p in map(json.loads, lines)]


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setenv("OPL_TOKEN", "opl_secret-personal-token")
    r = sdk.init(project="lab", name="n", config={"lr": 1e-3}, dir=tmp_path / "spool", mode="offline")
    yield r
    r.finish()


def test_steps_and_commit_follow_wandb(run):
    run.log({"a": 1})  # step 0, then the counter moves on
    run.log({"b": 2}, commit=False)  # kept for step 1
    run.log({"c": 3})  # step 1: b and c together
    run.log({"d": 4}, step=10)  # an explicit step
    run.log({"e": 5}, step=10, commit=False)
    run.log({"f": 6}, step=11)  # a new step commits what step 10 kept
    run.finish()
    assert points(run) == [
        (0, "a", 1.0),
        (1, "b", 2.0),
        (1, "c", 3.0),
        (10, "d", 4.0),
        (10, "e", 5.0),
        (11, "f", 6.0),
    ]


def test_nested_dicts_numpy_and_torch_scalars_and_what_is_skipped(run):
    run.log(
        {
            "train": {"reward_mean": np.float32(0.5), "count": np.int64(3)},
            "actor/pg_loss": torch.tensor(0.25),
            "flag": True,
            "nan": math.nan,
            "text": "not a number",
            "histogram": np.zeros(3),
            "none": None,
        },
        step=2,
    )
    run.finish()
    got = {key: value for _, key, value in points(run)}
    assert got == {
        "train/reward_mean": 0.5,
        "train/count": 3.0,
        "actor/pg_loss": 0.25,
        "flag": 1.0,
        "nan": "NaN",
    }


def test_keys_the_dashboard_refuses_are_dropped_with_one_warning(run, caplog):
    with caplog.at_level(logging.WARNING, logger="opl"):
        for step in range(3):
            run.log({"ok/key": 1, "bad key": 2, "x" * 201: 3, "a//b": 4}, step=step)
    run.finish()
    assert {key for _, key, _ in points(run)} == {"ok/key"}
    warned = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(warned) == 3 and any("'bad key'" in w for w in warned)


def test_bad_input_names_the_field(run):
    with pytest.raises(ValueError, match=r"step: from 0 to 2147483647, got -1"):
        run.log({"a": 1}, step=-1)
    with pytest.raises(ValueError, match=r"samples\[0\]\.reward: required"):
        run.log_samples([{"prompt": "p", "response": "r"}])
    with pytest.raises(ValueError, match=r"samples\[1\]: unknown fields \['colour'\]"):
        run.log_samples(
            [{"prompt": "p", "response": "r", "reward": 1}, {"prompt": "p", "response": "r", "reward": 0, "colour": 1}]
        )
    with pytest.raises(ValueError, match="mode: one of online, offline, disabled"):
        sdk.Run(mode="sideways")


def test_samples_get_their_place_and_the_spool_keeps_no_token(run):
    run.log({"a": 1}, step=4)
    run.log_samples(
        [{"prompt": "1+1=", "response": "2", "reward": 1.0}, {"prompt": "2+2=", "response": "5", "reward": math.inf}]
    )
    run.log_samples([{"prompt": "3+3=", "response": "6", "reward": np.float64(1.0)}], step=4)
    run.finish(exit_code=3)
    lines = [json.loads(line) for line in (run.dir / "samples.jsonl").read_text().splitlines()]
    assert [(s["kind"], s["step"], s["index"], s["reward"]) for s in lines] == [
        ("train", 4, 0, 1.0),
        ("train", 4, 1, None),  # a reward that is not finite is sent as null, as the trainer does
        ("train", 4, 2, 1.0),
    ]
    meta = json.loads((run.dir / "run.json").read_text())
    assert (meta["project"], meta["config"], meta["exit_code"]) == ("lab", {"lr": 1e-3}, 3)
    assert "secret" not in (run.dir / "run.json").read_text() and run_dirs(run.dir.parent) == [run.dir]


def test_opl_log_writes_to_the_open_run_and_disabled_writes_nothing(tmp_path):
    import opl

    with pytest.raises(RuntimeError, match=r"opl.init\(\) first"):
        opl.log({"a": 1})
    run = opl.init(dir=tmp_path / "one", mode="offline")
    opl.log({"a": 1})
    opl.finish()
    assert points(run) == [(0, "a", 1.0)]
    quiet = opl.init(dir=tmp_path / "two", mode="disabled")
    opl.log({"a": 1})
    opl.finish()
    assert not quiet.dir.exists()


def test_an_uncaught_exception_finishes_the_run_failed(tmp_path):
    script = (
        "import opl\n"
        f"opl.init(dir={str(tmp_path / 'crash')!r}, mode='offline')\n"
        "opl.log({'a': 1})\n"
        "raise RuntimeError('boom')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 1 and "boom" in done.stderr
    assert json.loads((tmp_path / "crash" / "run.json").read_text())["exit_code"] == 1
