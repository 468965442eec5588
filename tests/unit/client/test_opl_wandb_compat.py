"""`import opl as wandb`, offline: the W&B habits a training script has, and what each records in
the run's spool (metrics.jsonl for points, updates.jsonl for what `POST .../updates` receives)."""

import argparse
import json
import logging
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

import opl as wandb

REPO = Path(__file__).resolve().parents[3]


@dataclass
class Optim:
    lr: float = 1e-5
    betas: list = field(default_factory=lambda: [0.9, 0.95])


@dataclass
class TrainConfig:
    seed: int = 1
    optim: Optim = field(default_factory=Optim)


def updates(run) -> list[dict]:
    return [json.loads(line) for line in (run.dir / "updates.jsonl").read_text().splitlines()]


def points(run) -> list[tuple[int, str, object]]:
    return [
        (p["step"], p["key"], p["value"]) for p in map(json.loads, (run.dir / "metrics.jsonl").read_text().splitlines())
    ]


@pytest.mark.parametrize(
    "config",
    [
        {"seed": 1, "optim": {"lr": 1e-5, "betas": [0.9, 0.95]}},
        TrainConfig(),
        OmegaConf.create({"seed": 1, "optim": {"lr": 1e-5, "betas": [0.9, 0.95]}}),
        argparse.Namespace(seed=1, optim=argparse.Namespace(lr=1e-5, betas=[0.9, 0.95])),
    ],
    ids=["dict", "dataclass", "omegaconf", "namespace"],
)
def test_every_kind_of_config_keeps_its_sections(tmp_path, config):
    run = wandb.init(project="p", name="n", config=config, dir=tmp_path / "r", mode="offline", entity="e", reinit=True)
    assert wandb.run is run and wandb.config is run.config
    assert wandb.config.optim == {"lr": 1e-5, "betas": [0.9, 0.95]} and wandb.config["seed"] == 1
    wandb.finish()
    meta = json.loads((tmp_path / "r" / "run.json").read_text())
    assert meta["config"] == {"seed": 1, "optim": {"lr": 1e-5, "betas": [0.9, 0.95]}}


def test_a_table_from_a_dataframe_and_w_and_b_settings(tmp_path):
    import pandas as pd

    run = wandb.init(dir=tmp_path / "r", mode="offline", settings=wandb.Settings(start_method="thread"))
    wandb.log({"t": wandb.Table(dataframe=pd.DataFrame({"prompt": ["1+1="], "reward": [1.0]}))}, step=3)
    wandb.finish()
    assert updates(run) == [
        {"kind": "table", "key": "t", "step": 3, "columns": ["prompt", "reward"], "rows": [["1+1=", 1.0]]}
    ]


def test_a_config_that_is_no_config_is_refused_at_init_naming_the_field(tmp_path):
    with pytest.raises(TypeError, match="config: a dict, argparse.Namespace, dataclass or OmegaConf config"):
        wandb.init(config=42, dir=tmp_path / "r", mode="offline")


def test_what_a_wandb_script_records(tmp_path, caplog):
    run = wandb.init(project="p", name="n", config={"lr": 0.1}, dir=tmp_path / "r", mode="offline")
    with caplog.at_level(logging.WARNING, logger="opl"):
        wandb.config.update({"model": {"layers": 2}})
        wandb.config.warmup = 10
        wandb.config["lr"] = 0.2
        wandb.define_metric("eval/acc", summary="max")
        wandb.define_metric("eval/*", step_metric="epoch")
        wandb.log({"eval/acc": 0.5, "epoch": 1, "note": "lr halved", "grad": np.array([1.0, 2.0, 2.0, 3.0])}, step=7)
        hist = wandb.Histogram(np_histogram=([1, 2], [0.0, 0.5, 1.0]))
        table = wandb.Table(columns=["prompt", "response", "reward"], data=[["1+1=", "2", 1.0]])
        table.add_data("2+2=", "5", math.nan)
        wandb.log({"h": hist, "samples": table, "ids": [1, 2, 3]}, step=8)
        wandb.summary["best"] = 0.9
        run.summary.update({"final": math.inf})
        wandb.alert(title="collapse", text="reward fell", level=wandb.AlertLevel.WARN)
        wandb.watch(object())
        wandb.watch(object())
        wandb.save(str(tmp_path / "model.pt"))
        wandb.log_artifact(str(tmp_path / "ckpt"), name="ckpt", type="model")
        wandb.log({"bad": object()})
        wandb.log({"picture": wandb.Image(np.zeros((2, 2))), "picture ": wandb.Image(None)})
    assert (run.config.lr, run.config.warmup, run.config.model) == (0.2, 10, {"layers": 2})
    assert run.summary["eval/acc"] == 0.5 and run.summary["best"] == 0.9
    wandb.finish(exit_code=1)
    got = updates(run)
    assert [u["kind"] for u in got] == [
        "config",
        "config",
        "config",
        "define_metric",
        "define_metric",
        "summary",  # "note": a text goes to the summary
        "histogram",  # the array
        "histogram",
        "table",
        "histogram",  # the list of ids
        "summary",
        "summary",
        "alert",
        "summary",  # save: the file's path
        "summary",  # log_artifact: its path
    ]
    assert got[0] == {"kind": "config", "config": {"model": {"layers": 2}}}
    assert got[3] == {"kind": "define_metric", "name": "eval/acc", "step_metric": None, "summary": "max"}
    assert got[4]["step_metric"] == "epoch"
    assert got[5] == {"kind": "summary", "summary": {"note": "lr halved"}}
    assert (got[6]["key"], got[6]["step"], sum(got[6]["counts"])) == ("grad", 7, 4)
    assert got[7] == {"kind": "histogram", "key": "h", "step": 8, "bins": [0.0, 0.5, 1.0], "counts": [1.0, 2.0]}
    assert got[8] == {
        "kind": "table",
        "key": "samples",
        "step": 8,
        "columns": ["prompt", "response", "reward"],
        "rows": [["1+1=", "2", 1.0], ["2+2=", "5", "NaN"]],
    }
    assert got[11] == {"kind": "summary", "summary": {"final": "Infinity"}}
    assert got[12] == {"kind": "alert", "title": "collapse", "text": "reward fell", "level": "warn"}
    assert got[14]["summary"] == {"artifacts/ckpt": str(tmp_path / "ckpt")}
    assert [(s, k, v) for s, k, v in points(run) if k != "sdk/errors"] == [(7, "eval/acc", 0.5), (7, "epoch", 1.0)]
    meta = json.loads((run.dir / "run.json").read_text())
    assert meta["exit_code"] == 1 and meta["config"] == {"lr": 0.2, "model": {"layers": 2}, "warmup": 10}
    notes = [r.getMessage() for r in caplog.records]
    assert sum("watch() is accepted" in n for n in notes) == 1
    assert any("'bad': a object is not a number" in n for n in notes)
    assert sum("a Image is not recorded (opl records no media)" in n for n in notes) == 1
    assert run.errors == 3  # the object and the two images: counted, never silently dropped


def test_the_wandb_style_example_runs_offline(tmp_path):
    env = {"OPL_MODE": "offline", "OPL_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}  # the installed client
    done = subprocess.run(
        [sys.executable, str(REPO / "examples/tracking/wandb_style.py"), "--steps", "10", "--fail"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    [run_dir] = [p for p in tmp_path.iterdir() if (p / "run.json").exists()]
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["exit_code"] == 1 and meta["config"]["optim"] == {"lr": 1e-5, "betas": [0.9, 0.95]}
    logged = json.loads(done.stdout.strip().splitlines()[-1])["points"]
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == logged == 82 and "sdk/errors" not in done.stdout
    assert max(json.loads(line)["step"] for line in lines) == 3_000_000_000
    assert {u["kind"] for u in map(json.loads, (run_dir / "updates.jsonl").read_text().splitlines())} == {
        "config",
        "define_metric",
        "histogram",
        "table",
        "summary",
        "alert",
    }
