"""A batch behind a key's head costs the same however long the series is. The reads
that look for stored chunks near a batch (store.near_chunks, and the append's guard) are run under
EXPLAIN (ANALYZE, BUFFERS) on PostgreSQL: the buffers they touch must not grow when the series
grows tenfold. They grew linearly when the planner bounded the chunk index scan by the batch's
first step alone (the tables are never analyzed on a PostgreSQL without autovacuum) and read every
chunk up to the head of each key."""

import psycopg
import pytest
from django.db import connection  # noqa: F401 (the skipif expression)

from orchestrator.metrics import batches, store
from orchestrator.metrics.db import Result, Statements
from orchestrator.metrics.schemas import parse_columns
from orchestrator.metrics.services import metrics_ingest

from .helpers import make_run, points

pytestmark = [
    pytest.mark.django_db(transaction=True),  # each batch commits, as in production
    pytest.mark.skipif("connection.vendor != 'postgresql'", reason="EXPLAIN (BUFFERS) is PostgreSQL's"),
]
KEYS = [f"k{i:02d}" for i in range(10)]


class Explained(Statements):
    """Runs each statement under EXPLAIN (ANALYZE, BUFFERS); its result is the plan's buffers."""

    def execute(self, sql: str, params=()) -> Result:
        with psycopg.Cursor(self.conn) as cur:  # server-side binding, as Statements sends packed arrays
            cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, params)
            plan = cur.fetchone()[0][0]["Plan"]
        return Result(rows=[(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"],)])


def _store(run, first: int, last: int) -> None:
    """Steps [first, last) of every key, 20 steps of 10 keys a batch (the benchmark's shape)."""
    for a in range(first, last, 20):
        metrics_ingest(run=run, attempt=1, points=[p for k in KEYS for p in points(k, range(a, a + 20))])


def _buffers(run, steps) -> tuple[int, int]:
    batch = batches.sort_batch(parse_columns([p for k in KEYS for p in points(k, steps, value=lambda s: -1.0)]))
    db = Explained()
    near = store.near_chunks(db, run.pk, batch).one()[0]
    guard = store.guard_append(db, run.pk, 1, batch, store.last_seq(run.pk)).one()[0]
    return near, guard


def test_reading_near_a_batch_behind_the_head_touches_as_many_buffers_at_10x_the_series(alice, tiny_config):
    short, _ = make_run(alice, tiny_config, name="short")
    long, _ = make_run(alice, tiny_config, name="long")
    _store(short, 0, 400)
    _store(long, 0, 4000)
    behind = range(100, 120)  # re-posted steps early in both series: their chunks are found either way
    (near_short, guard_short), (near_long, guard_long) = _buffers(short, behind), _buffers(long, behind)
    assert near_long <= 1.5 * near_short + 10, (near_short, near_long)
    assert guard_long <= 1.5 * guard_short + 10, (guard_short, guard_long)
