"""The `opl` SDK's own logic, offline: W&B's step and commit rules, nested dicts as "a/b" keys,
keys kept as written (only control characters refused), 64-bit steps, samples checked against
docs/SAMPLES.md, nothing raised into the training loop after init (counted in sdk/errors and named
once), and a spool folder that holds no secret."""

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


def test_nested_dicts_numpy_and_torch_scalars_and_what_is_counted(run, caplog):
    with caplog.at_level(logging.WARNING, logger="opl"):
        run.log(
            {
                "train": {"reward_mean": np.float32(0.5), "count": np.int64(3)},
                "actor/pg_loss": torch.tensor(0.25),
                "flag": True,
                "nan": math.nan,
                "object": object(),
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
        "sdk/errors": 2.0,  # the two values that are not numbers: counted, never silently dropped
    }
    warned = [r.getMessage() for r in caplog.records]
    assert any("'object': a object is not a number" in w for w in warned)
    assert any("'none': a NoneType is not a number" in w for w in warned)


def test_any_printable_key_is_kept_as_written_and_only_control_characters_are_refused(run, caplog):
    keys = ["train/rewards/<lambda>/mean", "acc (val)", "loss [%]", "#tokens", "Genauigkeit/Übung", "准确率", "x" * 300]
    with caplog.at_level(logging.WARNING, logger="opl"):
        for step in range(3):
            run.log({**dict.fromkeys(keys, step), "bad\tkey": 1, "bidi\u202ekey": 2}, step=step)
    run.finish()
    logged = points(run)
    assert [key for _, key, _ in logged if key != "sdk/errors"] == keys * 3
    assert [(step, value) for step, key, value in logged if key == "sdk/errors"] == [(0, 2.0), (1, 4.0), (2, 6.0)]
    warned = [r.getMessage() for r in caplog.records if "not recorded" in r.getMessage()]
    assert len(warned) == 2 and "'bad\\tkey'" in warned[0]


def test_steps_go_past_2_31_and_a_bad_step_is_refused_once_without_raising(run, caplog):
    with caplog.at_level(logging.WARNING, logger="opl"):
        run.log({"tokens": 1}, step=3_000_000_000)
        run.log({"tokens": 2}, step=2**53 - 1)
        run.log({"tokens": 3}, step=np.int64(2**40))
        run.log({"tokens": 4}, step=5.0)  # a whole float is that step
        run.log({"tokens": 5}, step=3.7)
        run.log({"tokens": 6}, step=3.7)
        run.log({"tokens": 7}, step=-1)
        run.log({"tokens": 8}, step=2**53)
        run.log({"tokens": 9}, step="ten")
        run.log({"tokens": 10}, step=6)
    run.finish()
    assert [(step, value) for step, key, value in points(run) if key == "tokens"] == [
        (3_000_000_000, 1.0),
        (2**53 - 1, 2.0),
        (2**40, 3.0),
        (5, 4.0),
        (6, 10.0),
    ]
    assert [value for _, key, value in points(run) if key == "sdk/errors"] == [5.0]
    warned = [r.getMessage() for r in caplog.records]
    assert sum("got 3.7" in w for w in warned) == 1 and sum("from 0 to 2^53-1" in w for w in warned) == 1


def test_after_init_nothing_raises_into_the_training_loop(run, caplog):
    import opl

    with caplog.at_level(logging.WARNING, logger="opl"):
        run.log_samples([{"prompt": "p", "response": "r"}])
        run.log_samples(
            [{"prompt": "p", "response": "r", "reward": 1}, {"prompt": "p", "response": "r", "reward": 0, "colour": 1}]
        )
        run.log("not a dict")
        run.finish()
        run.log({"a": 1})
        run.log({"a": 2})
        opl.log({"a": 3})  # the module-level call reaches the finished run: counted, not raised
        run.log_samples([{"prompt": "p", "response": "r", "reward": 1}])
    lines = (run.dir / "samples.jsonl").read_text().splitlines()
    assert [json.loads(line)["reward"] for line in lines] == [1]
    assert run.errors == 7
    warned = [r.getMessage() for r in caplog.records]
    assert sum("log() after finish()" in w for w in warned) == 1
    assert any("samples[0] not recorded: reward required" in w for w in warned)
    assert any("samples[1] not recorded: unknown fields ['colour']" in w for w in warned)


def test_bad_arguments_to_init_name_the_field():
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


def test_opl_log_writes_to_the_open_run_and_disabled_writes_nothing(tmp_path, monkeypatch):
    import opl

    monkeypatch.setattr(sdk, "_last", None)  # no run opened in this process yet
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


def test_sys_exit_with_a_code_finishes_the_run_with_it(tmp_path):
    script = (
        f"import sys, opl\nopl.init(dir={str(tmp_path / 'exit')!r}, mode='offline')\nopl.log({{'a': 1}})\nsys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 3, done.stderr
    assert json.loads((tmp_path / "exit" / "run.json").read_text())["exit_code"] == 3
