"""The write path's parts: packed array parameters read back as sent, the ingestion hook that
alerts ride on (metrics never imports alerts), and compaction merging partial rollup buckets."""

import ast
import math
from pathlib import Path

import numpy as np
import pytest
from django.db import connection  # noqa: F401 (skipif expressions)

from orchestrator.metrics import store
from orchestrator.metrics.chunks import live_rows
from orchestrator.metrics.db import direct
from orchestrator.metrics.models import MetricRollup
from orchestrator.metrics.rows import Rows
from orchestrator.metrics.services import metrics_ingest

from .helpers import make_run, points

METRICS = Path(__file__).resolve().parents[3] / "orchestrator" / "metrics"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, inside functions too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def test_metrics_never_imports_alerts_and_batches_never_imports_store():
    for path in METRICS.rglob("*.py"):
        assert not any(m.startswith("orchestrator.alerts") for m in imported_modules(path)), path
    assert not any("metrics.store" in m for m in imported_modules(METRICS / "batches.py"))


@pytest.mark.django_db
def test_rows_of_every_column_type_read_back_as_sent():
    columns = (("f", "float8"), ("i", "int8"), ("s", "int2"), ("w", "int4"), ("t", "text"), ("b", "bytea"))
    data = [
        np.array([1.5, -0.0, np.nan, 1e308]),
        np.array([0, -1, 2**62, 7]),
        np.array([0, 1, -1, 3], np.int8),
        np.array([5, 6, 7, 2**31 - 1]),
        ["a/b", "ü/€", "", "x" * 300],
        [b"\x00\x01", b"", b"\xff" * 9, b"z"],
    ]
    db = direct()
    with_b, params = Rows(columns, data, postgres=db.postgres).with_clause()
    got = db.fetch(with_b + "SELECT f, i, s, w, t, b FROM b", params)
    assert [row[1:5] for row in got] == list(
        zip(*[c.tolist() if hasattr(c, "tolist") else c for c in data[1:5]], strict=True)
    )
    assert [bytes(row[5]) for row in got] == data[5]
    floats = [row[0] for row in got]
    assert floats[0] == 1.5 and floats[3] == 1e308 and (floats[2] is None or math.isnan(floats[2]))
    if db.postgres:  # empty columns are empty arrays
        with_b, params = Rows(columns, [c[:0] for c in data], postgres=True).with_clause()
        assert db.fetch(with_b + "SELECT count(*) FROM b", params) == [(0,)]


@pytest.mark.django_db
@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="rollups exist on PostgreSQL only")
def test_compaction_merges_each_buckets_partial_rows_into_one(alice, tiny_config):
    run, _ = make_run(alice, tiny_config)
    for lo in range(0, 600, 30):  # 20 batches into the same 1024- and 4096-step buckets
        metrics_ingest(run=run, attempt=1, points=points("actor/m2", range(lo, lo + 30)))
    merged = store.merged_rollups(run.pk)
    assert MetricRollup.objects.filter(run=run).count() > len(merged)
    store.compact_chunks(run.pk, keep_batches=0)
    assert MetricRollup.objects.filter(run=run).count() == len(merged)
    assert store.merged_rollups(run.pk) == merged
    assert [r[3] for r in merged if r[1] == 4096] == [600]  # its count: every point once


@pytest.mark.django_db
@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="the unlocked append is PostgreSQL's")
def test_an_append_checked_without_the_lock_is_refused_when_a_later_batch_stored_steps_in_its_range(alice, tiny_config):
    import psycopg
    from django.db import transaction

    from orchestrator.metrics.batches import sort_batch
    from orchestrator.metrics.schemas import parse_columns

    run, _ = make_run(alice, tiny_config)
    metrics_ingest(run=run, attempt=1, points=points("actor/m2", [10, 20]))  # batch 1
    between = sort_batch(parse_columns(points("actor/m2", [15])))
    db = direct()
    store.guard_append(db, run.pk, 1, between, 1)  # seen batch 1: its steps were checked
    with pytest.raises(psycopg.errors.DivisionByZero), transaction.atomic():
        store.guard_append(db, run.pk, 1, between, 0)  # batch 1 came after what was seen
    metrics_ingest(run=run, attempt=1, points=points("actor/m2", [15, 30]))  # and the path itself stores it
    assert [step for step, _, _ in live_rows(run.pk, "actor/m2")] == [10, 15, 20, 30]
