"""Async against sync training at an equal number of samples, with and without partial rollouts.

    .venv/bin/python benchmarks/async.py [--steps 8] [--model tiny] [--tokens 24] [--engine hf]
    .venv-vllm/bin/python benchmarks/async.py --engine vllm      # vLLM's CPU build

Each mode runs the real trainer as a job does (`python -m trainer run`), same model, same task, same
seed, the same number of training steps of the same batch size (so the same number of trained
samples):
- sync: stale_k with k = 0: generate a batch, then train on it; nothing overlaps;
- async: a generator process produces batches while the trainer trains (max_staleness leaves room
  for two batches ahead; weights published every update);
- async + partial: the same with rollout.partial: generation stops at each weight update, loads the
  new weights and continues the unfinished responses.
Throughput is samples trained per second between the first and the last step's metric timestamps
(start-up and model loading are not counted). The ideal overlap bound is (gen + train) / max(gen,
train), with gen and train the median seconds per step measured in sync mode; "of ideal" is the
speedup as a fraction of it. The utilisation columns are the steps' medians of
perf/trainer_idle_ratio and perf/gen_idle_ratio. Each process gets one torch thread; async uses one
core more than sync, so on a machine with few or shared cores the bound is out of reach (the note
under the table says when).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
MODES = ("sync", "async", "async+partial")


def run_config(mode: str, args) -> dict:
    staleness = {"mode": "stale_k", "k": 0} if mode == "sync" else {"mode": "async", "max_staleness": 5}
    rollout = {"group_size": 8, "prompts_per_step": args.prompts, "max_new_tokens": args.tokens, "engine": args.engine}
    if mode == "async+partial":
        rollout["partial"] = True
    model = {"name": args.model}
    if args.model == "tiny":
        model.update({"tiny_hidden_size": args.hidden, "tiny_layers": args.layers})
    return {
        "model": model,
        "task": {"name": "arithmetic", "min_digits": 1, "max_digits": 3, "eval_sets": []},
        "rollout": rollout,
        "algorithm": {"objective": "m2po", "lr": 3e-4, "updates_per_step": 2},
        "staleness": staleness,
        "train": {"steps": args.steps, "seed": 1, "torch_threads": 1, "device": "cpu"},
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0, "keep": 1},
    }


def run_mode(mode: str, args) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"opl-bench-async-{mode.replace('+', '-')}-") as tmp:
        config, run_dir = Path(tmp) / "run.yaml", Path(tmp) / "run"
        config.write_text(yaml.safe_dump(run_config(mode, args)))
        cmd = [sys.executable, "-m", "trainer", "run", "--config", str(config), "--run-dir", str(run_dir)]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{mode} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
        rows: dict[int, dict] = {}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            p = json.loads(line)
            rows.setdefault(p["step"], {})[p["key"]] = (p["value"], p["time"])
    return summarize([rows[s] for s in sorted(rows) if "train/samples_seen" in rows[s]])


def _median(rows: list[dict], key: str) -> float:
    values = [r[key][0] for r in rows if key in r]
    return statistics.median(values) if values else 0.0


def summarize(steps: list[dict]) -> dict:
    first, last, later = steps[0], steps[-1], steps[1:]
    wall = last["train/samples_seen"][1] - first["train/samples_seen"][1]
    samples = last["train/samples_seen"][0] - first["train/samples_seen"][0]
    return {
        "samples": last["train/samples_seen"][0],
        "samples_per_s": samples / wall,
        "gen_s": _median(later, "perf/gen_s"),
        "train_s": _median(later, "perf/train_s"),
        "trainer_idle": _median(later, "perf/trainer_idle_ratio"),
        "gen_idle": _median(later, "perf/gen_idle_ratio"),
        "staleness_max": max(r["rollout/observed_staleness_max"][0] for r in steps),
        "partial_frac": statistics.mean(r["rollout/partial_frac"][0] for r in steps)
        if "rollout/partial_frac" in last
        else 0.0,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--model", default="tiny", help="tiny, or a preset such as smollm2-135m")
    p.add_argument("--hidden", type=int, default=128, help="tiny model only")
    p.add_argument("--layers", type=int, default=4, help="tiny model only")
    p.add_argument("--prompts", type=int, default=16, help="prompts per step (8 samples each)")
    p.add_argument("--tokens", type=int, default=24, help="max new tokens per response")
    p.add_argument("--engine", choices=["hf", "vllm"], default="hf")
    args = p.parse_args()
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    results = {m: run_mode(m, args) for m in MODES}
    print(
        f"{args.model} ({args.engine} engine), arithmetic, {args.prompts} prompts x 8 samples, {args.tokens} tokens "
        f"at most, {args.steps} steps, 1 thread per process, {time.perf_counter() - t0:.0f} s in all"
    )
    sync = results["sync"]
    bound = (sync["gen_s"] + sync["train_s"]) / max(sync["gen_s"], sync["train_s"])
    print(
        f"{'mode':<15}{'samples':>8}{'samples/s':>11}{'speedup':>9}{'ideal':>7}{'of ideal':>10}"
        f"{'gen s':>8}{'train s':>9}{'trainer idle':>14}{'gen idle':>10}{'max stale':>11}{'partial':>9}"
    )
    for mode, r in results.items():
        speedup = r["samples_per_s"] / sync["samples_per_s"]
        print(
            f"{mode:<15}{r['samples']:>8.0f}{r['samples_per_s']:>11.2f}{speedup:>8.2f}x{bound:>6.2f}x"
            f"{speedup / bound:>10.2f}{r['gen_s']:>8.2f}{r['train_s']:>9.2f}{r['trainer_idle']:>14.2f}"
            f"{r['gen_idle']:>10.2f}{r['staleness_max']:>11.0f}{r['partial_frac']:>9.2f}"
        )
    cores = os.cpu_count() or 1
    if load_before > 0.5 * cores or cores < 2:
        print(
            f"note: load average {load_before:.1f} on {cores} cores before the benchmark: other work shares the "
            "cores, and the overlap falls short of its ideal"
        )


if __name__ == "__main__":
    main()
