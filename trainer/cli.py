"""Command line: `python -m trainer run --config FILE.yaml --run-dir DIR [--resume]`.

Exit codes: 0 done; 2 bad config or data (the message names the field, on stderr); 75 stopped by
the cluster (preemption, time limit, node drain) after a checkpoint, ready to be requeued with
--resume; 130 cancelled by a person after a checkpoint, not to be requeued; 1 anything else.

Signals (trainer/stopping.py acts on them): SIGINT is a cancel. SIGUSR1 and SIGTERM are the
cluster's graceful stop (Slurm sends them before a time limit or on preemption), unless the
orchestrator has written CANCEL_MARKER into the run directory first: Slurm's scancel also sends
SIGTERM, and the marker is how a person's cancel tells itself apart there. The local backend sends
SIGINT for a cancel and SIGUSR1 at a time limit. A cancel outranks a requeue: a job sent both (the
demo's Ctrl-C) exits 130. A cancel finding NO_CHECKPOINT_MARKER in the run directory exits 130
without the checkpoint (an alert's cancel of a run whose weights may be broken, e.g. by a NaN);
the trainer removes a stale one at start.
Also: `python -m trainer check --config FILE` (validate, print derived sizes) and
`python -m trainer schema` (the RunConfig JSON schema).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import signal
import sys
from pathlib import Path

from trainer.config import ConfigError, RunConfig, load_config
from trainer.data.benchmarks import DataError
from trainer.run_markers import CANCEL_MARKER, NO_CHECKPOINT_MARKER  # noqa: F401 (tests import them from here)
from trainer.stopping import StopRequest

EX_CONFIG = 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainer", description="OffPolicy Lab's bundled RL trainer")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train one run")
    run.add_argument("--config", required=True, help="run config (YAML)")
    run.add_argument("--run-dir", required=True, help="folder for config, metrics.jsonl and ckpt/")
    run.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --run-dir")
    check = sub.add_parser("check", help="validate a config and print the derived sizes")
    check.add_argument("--config", required=True)
    sub.add_parser("schema", help="print the RunConfig JSON schema")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # One INFO line per metrics POST would drown the job's log tail on the run page.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if args.command == "schema":
        print(json.dumps(RunConfig.model_json_schema(), indent=1))
        return 0
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return EX_CONFIG
    if args.command == "check":
        for line in cfg.derived().lines():
            print(line)
        return 0

    from trainer.loop import RewardFailure, Trainer  # torch and transformers load only for a real run
    from trainer.rollout.async_gen import SyncTimeout

    # A crash in native code (gloo, NCCL, a tokenizer) prints every thread's Python stack to stderr,
    # the job's log, instead of a bare "terminate called" or "Aborted".
    faulthandler.enable()
    run_dir = Path(args.run_dir)
    stop = StopRequest()  # what the signals asked for; the loop acts on it (trainer/stopping.py)
    for signum in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda received, _frame: stop.note(received, run_dir))
    trainer = Trainer(cfg, run_dir, resume=args.resume, stop=stop)
    try:
        return trainer.run()
    except DataError as exc:
        print(f"invalid run data: {exc}", file=sys.stderr)
        return EX_CONFIG
    except ConfigError as exc:  # checks that need the real world size run at start-up
        print(str(exc), file=sys.stderr)
        return EX_CONFIG
    except RewardFailure as exc:
        print(f"run stopped: {exc}", file=sys.stderr)
        return 1
    except SyncTimeout as exc:  # a hand-over with the async generator that missed its deadline
        print(f"run failed: {exc}", file=sys.stderr)
        return 1
