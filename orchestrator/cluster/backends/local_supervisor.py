"""Runs one local job and records how it ended: `python -m ...local_supervisor JOB_DIR -- ARGV`.

The local backend starts this in its own session (process group), so the job outlives the Celery
worker that launched it. It follows a cluster's rules (submitit's local controller does too):
SIGTERM/SIGUSR1 to the supervisor is a user's cancel, forwarded to the trainer as SIGINT (the
trainer's "cancelled" signal: checkpoint, exit 130, no requeue); shortly before the time limit the
trainer gets SIGUSR1 (the cluster's "stop for requeue": checkpoint, exit 75). SIGKILL follows
after a grace period, and the outcome is written atomically to exit.json, which is what the
backend reads as the job's final status. The start lock inherited from the backend (--lock-fd)
stays open for the supervisor's life: it tells a retried submit that this job exists.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _split(args: list[str]) -> tuple[list[str], list[str]]:
    """Our options before the first "--", the job's argv after it."""
    cut = args.index("--")
    return args[:cut], args[cut + 1 :]


def kill_job_processes() -> None:
    """SIGKILL every process of the job's process group but the supervisor: the job and anything
    it started (torchrun's ranks, reward workers, a generator). Killing only the direct child
    would leave a rank stuck in a collective running forever."""
    me, group = os.getpid(), os.getpgid(0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.getpgid(int(entry)) == group:
                os.kill(int(entry), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main() -> int:
    own, argv = _split(sys.argv[1:])
    parser = argparse.ArgumentParser()
    parser.add_argument("job_dir", type=Path)
    parser.add_argument("--stdout", required=True)
    parser.add_argument("--stderr", required=True)
    parser.add_argument("--cwd", default=None)
    parser.add_argument("--time-limit-s", type=float, default=0)
    parser.add_argument("--grace-s", type=float, default=30)
    parser.add_argument("--lock-fd", type=int, default=-1)  # kept open, never read
    args = parser.parse_args(own)

    with open(args.stdout, "ab") as out, open(args.stderr, "ab") as err:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=args.cwd)
    outcome = {"cancelled": False, "timed_out": False}

    def stop(reason: str) -> None:
        if outcome["cancelled"] or outcome["timed_out"]:
            return  # already stopping
        outcome[reason] = True
        if child.poll() is None:
            child.send_signal(signal.SIGINT if reason == "cancelled" else signal.SIGUSR1)
            threading.Timer(args.grace_s, lambda: child.poll() is None and kill_job_processes()).start()

    # Handlers first: from the moment job.json names our pid, a cancel may signal us.
    signal.signal(signal.SIGTERM, lambda *_: stop("cancelled"))
    signal.signal(signal.SIGUSR1, lambda *_: stop("cancelled"))
    write_json_atomic(
        args.job_dir / "job.json",
        {"supervisor_pid": os.getpid(), "pgid": os.getpgid(0), "child_pid": child.pid, "started_at": time.time()},
    )
    print(f"supervisor {os.getpid()} started job pid {child.pid}", flush=True)  # one line per start
    if (args.job_dir / "cancel-requested").exists():  # cancelled before job.json existed
        stop("cancelled")
    if args.time_limit_s > 0:
        warn_after = max(args.time_limit_s - args.grace_s, args.time_limit_s * 0.9)
        threading.Timer(warn_after, lambda: stop("timed_out")).start()

    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:
            continue
    write_json_atomic(args.job_dir / "exit.json", {"exit_code": code, "ended_at": time.time(), **outcome})
    os._exit(0)  # don't wait for pending timers


if __name__ == "__main__":
    sys.exit(main())
