"""The stop protocol: how a signal becomes a checkpoint and an exit code.

cli.py installs the signal handlers, which call `StopRequest.note`; the loop asks `StopProtocol.due()`
once per iteration and, when a stop is due, `finish()` checkpoints (or not) and returns the exit code.

What a signal means (cli.py's docstring has the cluster's side): SIGINT is a person's cancel (exit
130, not to be requeued); SIGUSR1 and SIGTERM are the cluster's stop for requeue (exit 75), unless
the orchestrator wrote CANCEL_MARKER into the run directory first. A cancel finding
NO_CHECKPOINT_MARKER exits without a checkpoint.

A cancel outranks a requeue and is never taken back. Both can reach one job: the demo's Ctrl-C sends
SIGTERM to the job's whole process group, trainer included, and the local supervisor answers it with
a SIGINT that its exit.json records as a cancel. The decision is therefore read again after the
checkpoint is written, and the log line says the final one: line, exit code and exit.json agree.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path

from trainer.run_markers import CANCEL_MARKER, NO_CHECKPOINT_MARKER

EX_OK = 0
EX_TEMPFAIL = 75  # "stopped for requeue": the cluster's graceful-stop signal was honoured
EX_CANCELLED = 130  # cancelled by a person: checkpointed, not to be requeued

# How a stop is meant, in rising precedence: the largest one asked for wins.
NO_STOP, REQUEUE, CANCEL, CANCEL_WITHOUT_CHECKPOINT = 0, 1, 2, 3


@dataclass
class StopRequest:
    """What the signals asked for so far: written by the signal handler, read by the loop."""

    signal: int | None = None
    level: int = NO_STOP

    def note(self, signum: int, run_dir: Path) -> None:
        """A signal arrived: SIGINT or a cancel marker is a cancel, anything else a requeue."""
        level = REQUEUE
        if signum == signal.SIGINT or (run_dir / CANCEL_MARKER).exists():
            level = CANCEL_WITHOUT_CHECKPOINT if (run_dir / NO_CHECKPOINT_MARKER).exists() else CANCEL
        self.signal = signum
        self.level = max(self.level, level)

    @property
    def asked(self) -> bool:
        return self.level > NO_STOP


class StopProtocol:
    """The loop's side: agree on a stop across ranks, then checkpoint and choose the exit code."""

    def __init__(self, request: StopRequest, agree_max):
        self.request = request  # written only by the signal handler
        self.agree_max = agree_max  # max over ranks (distributed.max_across, bound to the run's DistInfo)
        self.agreed = NO_STOP  # the same on every rank

    def _agree(self) -> int:
        """The largest level any rank holds. Signals reach ranks at different moments (or only one
        rank), so every rank calls this at the same point of the same iteration: all of them then
        enter the collective checkpoint (or skip it) together, and none is left generating alone.
        The request is only read here: a signal handled while the all-reduce returns must not be
        overwritten by the older value (it counts at the next call)."""
        self.agreed = max(self.agreed, self.agree_max(self.request.level))
        return self.agreed

    def due(self) -> bool:
        return self._agree() > NO_STOP

    def finish(self, version: int, save_checkpoint) -> int:
        """Checkpoint unless told not to; the exit code of the stop as it stands once that is done."""
        why = f"signal {self.request.signal}" if self.request.signal is not None else "another rank was signalled"
        if self.agreed == CANCEL_WITHOUT_CHECKPOINT:
            print(f"[trainer] {why}: cancelled without a checkpoint (an alert asked) at update {version}", flush=True)
            return EX_CANCELLED
        cancelled = "cancelled; " if self.agreed >= CANCEL else ""
        print(f"[trainer] {why}: {cancelled}checkpointing at update {version}", flush=True)
        save_checkpoint()
        if self._agree() >= CANCEL:  # a cancel that arrived while the checkpoint was written counts
            print(f"[trainer] cancelled at update {version}: checkpointed; exit {EX_CANCELLED}, no requeue", flush=True)
            return EX_CANCELLED
        print(f"[trainer] stopping for requeue at update {version}: checkpointed; exit {EX_TEMPFAIL}", flush=True)
        return EX_TEMPFAIL
