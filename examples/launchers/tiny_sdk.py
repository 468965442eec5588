"""A tiny training script for an admin-defined launcher (see launchers.yaml beside it).

It logs `train/loss` and `train/reward_mean` to the run the launcher created, from the job's
environment alone: OPL_URL, OPL_TOKEN and OPL_RUN_ID (and OPL_ATTEMPT). Until the `opl` SDK
attaches to a launcher's run with `opl.init()`, it posts to the same ingestion endpoint the bundled
trainer's pusher uses (POST {OPL_URL}/api/v1/runs/{id}/metrics with the run's bearer token).

Signals follow the bundled trainer's contract (trainer/cli.py): SIGINT is a person's cancel (exit
130); SIGUSR1 or SIGTERM is the cluster's stop for requeue (exit 75), unless the dashboard wrote
`cancel-requested` into the run folder first (Slurm's scancel sends SIGTERM): then it is a cancel.
The signal received is recorded in signal.json in the run folder, and the arguments received in
received.json, so tests can check both; progress.json is its checkpoint, which a requeued attempt
(OPL_ATTEMPT > 1) resumes from.
"""

import argparse
import json
import math
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

STOP = {"signal": None}


def on_signal(signum, _frame):
    STOP["signal"] = signal.Signals(signum).name


def post(path: str, body: dict) -> None:
    url = f"{os.environ['OPL_URL'].rstrip('/')}/api/v1/runs/{os.environ['OPL_RUN_ID']}/{path}"
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {os.environ['OPL_TOKEN']}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--sleep", type=float, default=0.2, help="seconds per step")
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    run_dir = Path(os.environ.get("OPL_RUN_DIR") or os.getcwd())
    attempt = int(os.environ.get("OPL_ATTEMPT", "1"))
    received = {"argv": sys.argv[1:], "note": args.note, "env": sorted(k for k in os.environ if k.startswith("OPL_"))}
    (run_dir / "received.json").write_text(json.dumps(received))
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        signal.signal(signum, on_signal)
    print(f"tiny_sdk: {args.steps} steps at lr {args.lr}, attempt {attempt}", flush=True)

    progress = run_dir / "progress.json"  # its "checkpoint": a requeued attempt goes on from there
    first = json.loads(progress.read_text())["step"] + 1 if attempt > 1 and progress.exists() else 1
    for step in range(first, args.steps + 1):
        loss = math.exp(-args.lr * step)
        now = time.time()
        points = [
            {"step": step, "key": "train/loss", "value": loss, "time": now},
            {"step": step, "key": "train/reward_mean", "value": 1 - loss, "time": now},
        ]
        post("metrics", {"attempt": attempt, "points": points})
        post("heartbeat", {"attempt": attempt, "step": step, "total_steps": args.steps})
        progress.write_text(json.dumps({"step": step}))
        print(f"step {step} loss {loss:.4f}", flush=True)
        deadline = time.monotonic() + args.sleep
        while STOP["signal"] is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if STOP["signal"] is not None:
            cancelled = STOP["signal"] == "SIGINT" or (run_dir / "cancel-requested").exists()
            outcome = {"signal": STOP["signal"], "step": step, "cancelled": cancelled}
            (run_dir / "signal.json").write_text(json.dumps(outcome))
            print(f"tiny_sdk: {STOP['signal']} at step {step}: {'cancelled' if cancelled else 'stopping for requeue'}")
            return 130 if cancelled else 75
    print("tiny_sdk: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
