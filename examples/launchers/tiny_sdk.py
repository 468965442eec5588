"""A tiny training script for an admin-defined launcher (see launchers.yaml beside it).

It logs `train/loss` and `train/reward_mean` with the `opl` SDK. In a launcher's job the SDK needs
no arguments: `opl.init()` attaches to the run the launcher created, from the job's environment
(OPL_URL, OPL_TOKEN, OPL_RUN_ID and OPL_ATTEMPT), and pushes from a spool in the run folder.

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
from pathlib import Path

try:
    import opl
except ImportError:  # run from a checkout where the client is not installed (pip install ./client)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "client"))
    import opl

STOP = {"signal": None}


def on_signal(signum, _frame):
    STOP["signal"] = signal.Signals(signum).name


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

    run = opl.init(push_interval_s=0.5)  # attaches to the launcher's run: OPL_RUN_ID and its token
    progress = run_dir / "progress.json"  # its "checkpoint": a requeued attempt goes on from there
    first = json.loads(progress.read_text())["step"] + 1 if attempt > 1 and progress.exists() else 1
    for step in range(first, args.steps + 1):
        loss = math.exp(-args.lr * step)
        run.log({"train/loss": loss, "train/reward_mean": 1 - loss}, step=step)
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
            code = 130 if cancelled else 75
            run.finish(exit_code=code)  # pushes what is left; the job's exit code sets the run's state
            return code
    run.finish()
    print("tiny_sdk: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
