"""The metric rules' check of an ingested batch, carried by the ingestion write path's own round
trips (orchestrator/metrics/pipeline.py) as a rider it offers through its registry
(orchestrator/metrics/ingest_hooks.py; registered in apps.py), so that a trainer's batch, which
nearly always carries a watched key, costs what any other batch costs.

1. With the write path's first round trip, before the run's stream row lock: the run's rule rows
   (the same query as services.effective_rules), the kinds already fired in the run's attempt,
   and, when the batch carries train/reward_mean, the run's watch row, created if missing and
   locked FOR UPDATE (that lock orders the folds of the run's batches).
2. Between the round trips, in this process: the pure checks (rules.check_batch), which fold the
   batch's reward steps into the watch row's track.
3. With the second round trip, before its COMMIT: the watch row's new track. The fold commits or
   rolls back with the batch's points, and steps at or before the row's reward_step are skipped as
   before (a re-posted batch).
4. After commit (services.alerts_after_ingest): alert_fire for a firing whose kind has not fired in
   this attempt; the unique constraint on (run, attempt, kind) still decides.

Where the write path has no round trips to share (SQLite, the demo), or the in-process check
raised here (then nothing of the fold was sent), the check runs after commit on its own
(services._check_batch)."""

from __future__ import annotations

import logging

from orchestrator.alerts import rules
from orchestrator.alerts.models import Alert, RunWatch
from orchestrator.alerts.services import alerts_after_ingest, rule_rows_query, rules_from_rows
from orchestrator.metrics.chunks import as_float

log = logging.getLogger(__name__)
REWARD_KEY = rules.KEYS[rules.REWARD_DROP][0]
_WATCH = RunWatch._meta.db_table
_ENSURE_WATCH = (
    f"INSERT INTO {_WATCH} (run_id, reward_points, reward_step, last_step) VALUES (%s, 0, -1, -1) "
    "ON CONFLICT (run_id) DO NOTHING"
)
_LOCK_WATCH = f"SELECT reward_ema, reward_best, reward_points, reward_step FROM {_WATCH} WHERE run_id = %s FOR UPDATE"
_SAVE_WATCH = (
    f"UPDATE {_WATCH} SET reward_ema = %s, reward_best = %s, reward_points = %s, reward_step = %s WHERE run_id = %s"
)
_FIRED = f"SELECT kind FROM {Alert._meta.db_table} WHERE run_id = %s AND attempt = %s"


class BatchCheck:
    """One batch's check; `for_batch` gives None when the batch carries no watched key."""

    def __init__(self, run_id: int, attempt: int, points: dict[str, list[tuple[int, float]]]):
        self.run_id, self.attempt, self.points = run_id, attempt, points
        self.firings: list[rules.Firing] | None = None  # set once checked inside the pipeline
        self.rules: dict[str, rules.Rule] = {}
        self.fired_kinds: set[str] = set()
        self._cursors: tuple | None = None

    @classmethod
    def for_batch(cls, run, incoming: dict) -> BatchCheck | None:
        """`incoming`: the batch's step-sorted Points per key; `run.attempt` is the attempt alerts belong to."""
        watched = rules.WATCHED_KEYS.intersection(incoming)
        if not watched:
            return None
        points = {
            key: [
                (step, as_float(value, special))
                for step, value, special in zip(
                    incoming[key].steps.tolist(),
                    incoming[key].values.tolist(),
                    incoming[key].specials.tolist(),
                    strict=True,
                )
            ]
            for key in watched
        }
        return cls(run.pk, run.attempt, points)

    def send_reads(self, conn) -> None:
        """Queue the reads in the write path's first round trip (statements only: no wait)."""
        rules_cur, fired_cur = conn.cursor(), conn.cursor()
        sql, params = rule_rows_query(self.run_id)
        rules_cur.execute(sql, params)
        fired_cur.execute(_FIRED, [self.run_id, self.attempt])
        watch_cur = None
        if REWARD_KEY in self.points:
            conn.cursor().execute(_ENSURE_WATCH, [self.run_id])
            watch_cur = conn.cursor()
            watch_cur.execute(_LOCK_WATCH, [self.run_id])
        self._cursors = (rules_cur, fired_cur, watch_cur)

    def send_writes(self, cur) -> None:
        """Once the first round trip is answered: check the batch and queue the watch row's new
        track before the COMMIT. A failure of the check leaves `firings` None (checked after commit)."""
        rules_cur, fired_cur, watch_cur = self._cursors
        run_rules = rules_from_rows(rules_cur.fetchall())
        fired_kinds = {kind for (kind,) in fired_cur.fetchall()}
        track = rules.RewardTrack(*watch_cur.fetchone()) if watch_cur is not None else rules.RewardTrack()
        try:
            before = track.points
            firings = rules.check_batch(run_rules, self.points, track)
        except Exception:
            log.exception("alert check of run %s failed in the pipeline; checked again after commit", self.run_id)
            return
        if watch_cur is not None and track.points != before:
            cur.execute(_SAVE_WATCH, [track.ema, track.best, track.points, track.last_step, self.run_id])
        self.rules, self.fired_kinds, self.firings = run_rules, fired_kinds, firings

    def after_commit(self, *, run, cols) -> None:
        alerts_after_ingest(run=run, cols=cols, check=self)
