"""The run's metric log on rank 0: the spool (metrics.jsonl), the pusher that posts it to the
dashboard, and the system-metrics sampler. Other ranks hold an inert log: their values reach rank 0
through the loop's all-reduce, never through here."""

from __future__ import annotations

from pathlib import Path

from trainer.metric_keys import is_known
from trainer.reporting import MetricSpool, Pusher
from trainer.telemetry.system_metrics import SystemSampler


class MetricLog:
    def __init__(self):
        self.spool: MetricSpool | None = None
        self.pusher: Pusher | None = None
        self.system: SystemSampler | None = None

    def start(self, run_dir: Path, reporting, total_updates: int, start_step: int) -> None:
        """Start writing and pushing (rank 0). `start_step` is the update the run starts from."""
        self.spool = MetricSpool(run_dir)
        self.pusher = Pusher(run_dir, reporting, total_updates)
        self.pusher.step = start_step
        self.pusher.start()
        # At the steps the trainer logs (the pusher's), from after the start: a point at 0 on a
        # resume would start the new attempt at 0 (ingestion supersedes an older attempt's
        # points from there), and one at the start step could repeat a point the spool kept.
        self.system = SystemSampler(reporting.system_s, self.spool.log, lambda: self.pusher.step, after_step=start_step)
        self.system.start()

    def log(self, step: int, values: dict[str, float], advance: bool = True) -> None:
        """`advance` False: a point for an earlier step (a checkpoint committed late) that leaves
        the pusher's step where it is."""
        unknown = [k for k in values if not is_known(k)]
        if unknown:
            raise KeyError(f"metric keys missing from trainer/metric_keys.py: {unknown}")
        if self.spool is not None:
            self.spool.log(step, values)
        if self.pusher is not None and advance:
            self.pusher.step = step

    def failure_counts(self) -> dict[str, float]:
        """The pusher's failure counters (rank 0), a point when one changes."""
        return self.pusher.failure_counts() if self.pusher is not None else {}

    def sync(self) -> None:
        """Metrics up to now durable on disk (before a checkpoint)."""
        if self.spool is not None:
            self.spool.sync()

    def close(self) -> None:
        if self.system is not None:
            self.system.close()
            self.system = None
        if self.pusher is not None:
            self.pusher.close()
            self.pusher = None
        if self.spool is not None:
            self.spool.close()
            self.spool = None
