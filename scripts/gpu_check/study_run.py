"""On the GPU machine, after the checks: a planned study (study_plan.py) through the trainer's CLI.

    python3 scripts/gpu_check/study_run.py PLAN.json WORKDIR STUDY.json RUNS.tar.gz
        --seconds N [--parallel P] [--device cuda|cpu]

The warm-up runs first; every run of the sweep then forks from its final checkpoint
(init.from_path), P at a time. A run starts only while the time left covers the longest run seen
so far, so the phase ends inside its N seconds with whole runs, not killed ones; what did not
start is listed. STUDY.json gets each run's exit code, wall time, last step and last
rollout/reward_mean; RUNS.tar.gz each run's config, metrics.jsonl and log tail (no checkpoints),
for the experiment page's statistics here. Exit 1 if a run failed.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
REWARD_KEY = "rollout/reward_mean"
LOG_TAIL_LINES = 200


class Clock:
    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds
        self.longest = 0.0  # the longest run so far: the estimate for the next

    def left(self) -> float:
        return self.end - time.monotonic()


def run_one(name: str, config: dict, work: Path, clock: Clock) -> dict:
    run_dir = work / name
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run-config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    row: dict = {"name": name}
    if clock.left() < max(clock.longest, 5.0):
        return {**row, "status": "not started: too little time left"}
    t0 = time.monotonic()
    with open(run_dir / "trainer.log", "w") as log:
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "trainer",
                    "run",
                    "--config",
                    str(run_dir / "run-config.yaml"),
                    "--run-dir",
                    str(run_dir),
                ],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=max(clock.left(), 1.0),
            )
            rc = done.returncode
        except subprocess.TimeoutExpired:
            rc = None
    seconds = time.monotonic() - t0
    clock.longest = max(clock.longest, seconds)
    row.update(
        rc=rc, seconds=round(seconds, 1), status="done" if rc == 0 else ("timed out" if rc is None else "failed")
    )
    row.update(last_points(run_dir / "metrics.jsonl"))
    tail = (run_dir / "trainer.log").read_text(errors="replace").splitlines()[-12:]
    print(
        f"study: {name}: {row['status']} in {seconds:.0f} s"
        + (f", last {REWARD_KEY} {row['reward_last']:.3f}" if row.get("reward_last") is not None else "")
    )
    if rc != 0:
        print("\n".join(f"study:   | {line}" for line in tail))
    return row


def last_points(metrics: Path) -> dict:
    """The last step written and the last value of the reward: what a run reached (the seed
    statistics and tail means are the experiment page's, from the metrics themselves)."""
    out = {"last_step": None, "reward_last": None}
    if not metrics.exists():
        return out
    for line in metrics.read_text().splitlines():
        try:
            point = json.loads(line)
        except ValueError:
            continue
        out["last_step"] = max(out["last_step"] or 0, point.get("step", 0))
        if point.get("key") == REWARD_KEY:
            out["reward_last"] = point.get("value")
    return out


def pack(work: Path, names: list[str], tar_path: Path) -> None:
    with tarfile.open(tar_path, "w:gz") as tar:
        for name in names:
            run_dir = work / name
            for file in ("run-config.yaml", "metrics.jsonl"):
                if (run_dir / file).exists():
                    tar.add(run_dir / file, arcname=f"{name}/{file}")
            if (run_dir / "trainer.log").exists():
                tail = "\n".join(
                    (run_dir / "trainer.log").read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
                ).encode()
                info = tarfile.TarInfo(f"{name}/trainer-tail.log")
                info.size = len(tail)
                tar.addfile(info, io.BytesIO(tail))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plan", type=Path)
    p.add_argument("work", type=Path)
    p.add_argument("report", type=Path)
    p.add_argument("tar", type=Path)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = p.parse_args()
    clock = Clock(args.seconds)
    plan = json.loads(args.plan.read_text())
    report: dict = {"preset": plan.get("preset"), "override": plan.get("override"), "cut": plan.get("cut")}

    def finish(code: int) -> int:
        args.report.write_text(json.dumps(report, indent=1))
        return code

    if "skipped" in plan:
        report["skipped"] = plan["skipped"]
        print(f"study: skipped: {plan['skipped']}")
        return finish(0)
    planned_device = {r["config"]["train"]["device"] for r in plan["runs"]}
    if args.device == "cuda" and planned_device == {"cpu"}:
        report["error"] = "the bundle's study plan is the CPU dry run's: fetch the wheels again without GPU_CHECK_DRY"
        print(f"study: {report['error']}")
        return finish(1)

    args.work.mkdir(parents=True, exist_ok=True)
    rows, names = [], []
    fork_from = None
    if plan["warmup"]:
        warm = run_one(plan["warmup"]["name"], plan["warmup"]["config"], args.work, clock)
        report["warmup"] = warm
        names.append(warm["name"])
        if warm.get("rc") != 0:
            report["runs"] = [
                {"name": r["name"], "status": "not started: the warm-up did not finish"} for r in plan["runs"]
            ]
            pack(args.work, names, args.tar)
            return finish(1)
        fork_from = str(args.work / warm["name"])

    def fork(run: dict) -> dict:
        config = copy.deepcopy(run["config"])
        if fork_from:
            config["init"] = {**(config.get("init") or {}), "from_run": None, "from_step": None, "from_path": fork_from}
        return {**run_one(run["name"], config, args.work, clock), "values": run["values"], "seed": run["seed"]}

    with ThreadPoolExecutor(max_workers=max(1, args.parallel)) as pool:
        rows = list(pool.map(fork, plan["runs"]))
    names += [r["name"] for r in rows]
    report["runs"] = rows
    done = sum(r["status"] == "done" for r in rows)
    report["done"], report["planned"] = done, len(rows)
    pack(args.work, names, args.tar)
    print(
        f"study: {done} of {len(rows)} runs done"
        + (f" ({plan['cut']})" if plan.get("cut") else "")
        + f"; metrics in {args.tar.name}"
    )
    return finish(1 if any(r["status"] in ("failed", "timed out") for r in rows) else 0)


if __name__ == "__main__":
    sys.exit(main())
