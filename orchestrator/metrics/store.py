"""The SQL behind ingestion: bulk upserts, supersession, per-key summaries and rollups.

Every function runs inside the caller's transaction. PostgreSQL gets set-based statements over
arrays (one round trip per batch, binary parameters, no per-row ORM objects); SQLite, used by the
demo, gets the same semantics through executemany and has no rollups (its charts read points).
"""
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connection

# Rollup bucket widths in steps, finest first. Each level is built from the one below it.
# Fanout 4 keeps a chart's read within 4 rollup rows per drawn bucket (compare pages read many runs).
LEVELS = (16, 64, 256, 1024, 4096)
FANOUT = 4
assert all(b == a * FANOUT for a, b in zip(LEVELS, LEVELS[1:], strict=False))

POINT = "metrics_metricpoint"
SERIES = "metrics_metricseries"
ROLLUP = "metrics_metricrollup"
ATTEMPT = "metrics_metricattempt"
STREAM = "metrics_metricstream"


@dataclass(frozen=True)
class Columns:
    """A deduplicated batch as parallel columns; `values` holds None where `specials` is not 0."""

    keys: list[str]
    steps: list[int]
    values: list[float | None]
    specials: list[int]
    times: list[float]


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def _raw_pg_cursor():
    """psycopg's own cursor on Django's connection (same transaction): server-side binding sends
    arrays in binary, where Django's client-side cursor would render them as SQL text."""
    import psycopg

    connection.ensure_connection()
    return psycopg.Cursor(connection.connection)


def next_seq(run_id: int) -> int:
    """Take the run's next batch number; the row stays locked until the batch commits."""
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {STREAM} (run_id, last_seq) VALUES (%s, 1) "
            f"ON CONFLICT (run_id) DO UPDATE SET last_seq = {STREAM}.last_seq + 1 RETURNING last_seq",
            [run_id],
        )
        return cur.fetchone()[0]


def last_seq(run_id: int) -> int:
    with connection.cursor() as cur:
        cur.execute(f"SELECT last_seq FROM {STREAM} WHERE run_id = %s", [run_id])
        row = cur.fetchone()
    return row[0] if row else 0


def note_attempt_start(run_id: int, attempt: int, min_step: int, seq: int) -> bool:
    """Record where `attempt` starts; True when that start is new or moved earlier."""
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {ATTEMPT} (run_id, attempt, start_step, seq) VALUES (%s, %s, %s, %s) "
            f"ON CONFLICT (run_id, attempt) DO UPDATE SET start_step = excluded.start_step, seq = excluded.seq "
            f"WHERE {ATTEMPT}.start_step > excluded.start_step RETURNING start_step",
            [run_id, attempt, min_step, seq],
        )
        return cur.fetchone() is not None


def supersede(run_id: int, attempt: int, from_step: int) -> int:
    """Mark older attempts' live points at or after `from_step` superseded; returns how many."""
    with connection.cursor() as cur:
        cur.execute(
            f"UPDATE {POINT} SET superseded = %s WHERE run_id = %s AND attempt < %s AND step >= %s "
            f"AND NOT superseded",
            [True, run_id, attempt, from_step],
        )
        return cur.rowcount


def appends_only(run_id: int, first_steps: dict[str, int]) -> bool:
    """True when each key's first step in a batch lies after its last stored step (a live
    trainer's usual batch), so a plain INSERT cannot conflict. Called under the run's seq lock."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT key, last_step FROM {SERIES} WHERE run_id = %s AND key IN ({', '.join(['%s'] * len(first_steps))})",
                    [run_id, *first_steps])
        return all(first_steps[key] > last for key, last in cur.fetchall())


def insert_points(run_id: int, attempt: int, seq: int, cols: Columns) -> bool:
    """Binary COPY (PostgreSQL), the cheapest way in; about a third cheaper than the upsert.
    Returns False, having written nothing, if a point already existed after all."""
    import psycopg
    from django.db import transaction

    try:
        with transaction.atomic(), _raw_pg_cursor() as cur, cur.copy(
                f"COPY {POINT} (run_id, attempt, key, step, value, special, time, seq, superseded) "
                "FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "int4", "text", "int8", "float8", "int2", "float8", "int8", "bool"])
            for row in zip(cols.keys, cols.steps, cols.values, cols.specials, cols.times, strict=True):
                copy.write_row((run_id, attempt, *row, seq, False))
        return True
    except psycopg.errors.UniqueViolation:
        return False


def upsert_points(run_id: int, attempt: int, seq: int, cols: Columns) -> None:
    if is_postgres():
        with _raw_pg_cursor() as cur:
            cur.execute(
                f"INSERT INTO {POINT} (run_id, attempt, key, step, value, special, time, seq, superseded) "
                "SELECT %s, %s, u.k, u.s, u.v, u.sp, u.t, %s, false "
                "FROM unnest(%b::text[], %b::int8[], %b::float8[], %b::int2[], %b::float8[]) AS u(k, s, v, sp, t) "
                "ON CONFLICT (run_id, key, step) WHERE NOT superseded DO UPDATE SET value = excluded.value, "
                "special = excluded.special, time = excluded.time, seq = excluded.seq, attempt = excluded.attempt",
                [run_id, attempt, seq, cols.keys, cols.steps, cols.values, cols.specials, cols.times],
            )
        return
    with connection.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {POINT} (run_id, attempt, key, step, value, special, time, seq, superseded) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (run_id, key, step) WHERE NOT superseded DO UPDATE SET value = excluded.value, "
            "special = excluded.special, time = excluded.time, seq = excluded.seq, attempt = excluded.attempt",
            [(run_id, attempt, k, s, v, sp, t, seq, False)
             for k, s, v, sp, t in zip(cols.keys, cols.steps, cols.values, cols.specials, cols.times, strict=True)],
        )


# --- per-key summaries ---------------------------------------------------------------------------

def _keep(old: str, new: str, take_new_if: str) -> str:
    return f"CASE WHEN {take_new_if} THEN {new} ELSE {old} END"


def upsert_series(run_id: int, summaries: Iterable[tuple]) -> None:
    """Fold a batch's per-key (key, first, last_step, last_value, last_special, min, max) into the
    stored summaries. Portable SQL: the same statement runs on PostgreSQL and SQLite."""
    t = SERIES
    newer = f"excluded.last_step >= {t}.last_step"
    lower = f"excluded.min_value IS NOT NULL AND ({t}.min_value IS NULL OR excluded.min_value < {t}.min_value)"
    higher = f"excluded.max_value IS NOT NULL AND ({t}.max_value IS NULL OR excluded.max_value > {t}.max_value)"
    summaries = list(summaries)
    if not summaries:
        return
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(summaries))
    sql = (
        f"INSERT INTO {t} (run_id, key, first_step, last_step, last_value, last_special, min_value, max_value) "
        f"VALUES {values} ON CONFLICT (run_id, key) DO UPDATE SET "
        f"first_step = {_keep(f'{t}.first_step', 'excluded.first_step', f'excluded.first_step < {t}.first_step')}, "
        f"last_value = {_keep(f'{t}.last_value', 'excluded.last_value', newer)}, "
        f"last_special = {_keep(f'{t}.last_special', 'excluded.last_special', newer)}, "
        f"last_step = {_keep(f'{t}.last_step', 'excluded.last_step', newer)}, "
        f"min_value = {_keep(f'{t}.min_value', 'excluded.min_value', lower)}, "
        f"max_value = {_keep(f'{t}.max_value', 'excluded.max_value', higher)}"
    )
    with connection.cursor() as cur:
        cur.execute(sql, [v for row in summaries for v in (run_id, *row)])


def rebuild_series(run_id: int) -> None:
    """Recompute every key's summary of a run from its live points (after a supersession)."""
    with connection.cursor() as cur:
        cur.execute(f"DELETE FROM {SERIES} WHERE run_id = %s", [run_id])
        cur.execute(
            f"INSERT INTO {SERIES} (run_id, key, first_step, last_step, last_value, last_special, min_value, max_value) "
            "SELECT p.run_id, p.key, a.first_step, a.last_step, p.value, p.special, a.min_value, a.max_value "
            f"FROM (SELECT key, MIN(step) AS first_step, MAX(step) AS last_step, MIN(value) AS min_value, "
            f"MAX(value) AS max_value FROM {POINT} WHERE run_id = %s AND NOT superseded GROUP BY key) a "
            f"JOIN {POINT} p ON p.run_id = %s AND p.key = a.key AND p.step = a.last_step AND NOT p.superseded",
            [run_id, run_id],
        )


# --- rollups (PostgreSQL) -----------------------------------------------------------------------

_ROLLUP_COLUMNS = ("run_id, key, width, bucket, n, min_value, min_step, max_value, max_step, "
                   "last_step, last_value, last_special, last_time, special_step, special_kind")
_ROLLUP_UPDATE = ", ".join(f"{c} = excluded.{c}" for c in _ROLLUP_COLUMNS.split(", ")[4:])

# Aggregates over points p. Arrays carry (value, step) pairs so one min/max finds both; max ties
# go to the earliest step. `last` is the point with the highest step.
_FROM_POINTS = """
    count(*),
    (min(ARRAY[p.value, p.step]) FILTER (WHERE p.special = 0))[1],
    (min(ARRAY[p.value, p.step]) FILTER (WHERE p.special = 0))[2]::int8,
    (max(ARRAY[p.value, -p.step]) FILTER (WHERE p.special = 0))[1],
    (-(max(ARRAY[p.value, -p.step]) FILTER (WHERE p.special = 0))[2])::int8,
    max(p.step),
    (max(ARRAY[p.step, p.value, p.special, p.time]))[2],
    (max(ARRAY[p.step, p.value, p.special, p.time]))[3]::int2,
    (max(ARRAY[p.step, p.value, p.special, p.time]))[4],
    (max(ARRAY[p.step, p.special]) FILTER (WHERE p.special <> 0))[1]::int8,
    (max(ARRAY[p.step, p.special]) FILTER (WHERE p.special <> 0))[2]::int2
"""
# The same over child rollups c.
_FROM_CHILDREN = """
    sum(c.n),
    (min(ARRAY[c.min_value, c.min_step]) FILTER (WHERE c.min_value IS NOT NULL))[1],
    (min(ARRAY[c.min_value, c.min_step]) FILTER (WHERE c.min_value IS NOT NULL))[2]::int8,
    (max(ARRAY[c.max_value, -c.max_step]) FILTER (WHERE c.max_value IS NOT NULL))[1],
    (-(max(ARRAY[c.max_value, -c.max_step]) FILTER (WHERE c.max_value IS NOT NULL))[2])::int8,
    max(c.last_step),
    (max(ARRAY[c.last_step, c.last_value, c.last_special, c.last_time]))[2],
    (max(ARRAY[c.last_step, c.last_value, c.last_special, c.last_time]))[3]::int2,
    (max(ARRAY[c.last_step, c.last_value, c.last_special, c.last_time]))[4],
    (max(ARRAY[c.special_step, c.special_kind]) FILTER (WHERE c.special_step IS NOT NULL))[1]::int8,
    (max(ARRAY[c.special_step, c.special_kind]) FILTER (WHERE c.special_step IS NOT NULL))[2]::int2
"""


def _level_from_points(source: str) -> str:
    w = LEVELS[0]
    return (
        f"INSERT INTO {ROLLUP} ({_ROLLUP_COLUMNS}) "
        f"SELECT p.run_id, p.key, {w}, p.step / {w}, {_FROM_POINTS} {source} "
        f"GROUP BY p.run_id, p.key, p.step / {w} "
        f"ON CONFLICT (run_id, key, width, bucket) DO UPDATE SET {_ROLLUP_UPDATE}"
    )


def _level_from_children(width: int, source: str) -> str:
    return (
        f"INSERT INTO {ROLLUP} ({_ROLLUP_COLUMNS}) "
        f"SELECT c.run_id, c.key, {width}, c.bucket / {FANOUT}, {_FROM_CHILDREN} {source} "
        f"GROUP BY c.run_id, c.key, c.bucket / {FANOUT} "
        f"ON CONFLICT (run_id, key, width, bucket) DO UPDATE SET {_ROLLUP_UPDATE}"
    )


def _ranges(pairs: set[tuple[str, int]]) -> tuple[list[str], list[int], list[int]]:
    """(key, bucket) pairs as per-key runs of consecutive buckets: keys, first and last bucket."""
    keys, firsts, lasts = [], [], []
    for key, bucket in sorted(pairs):
        if keys and keys[-1] == key and lasts[-1] == bucket - 1:
            lasts[-1] = bucket
        else:
            keys.append(key), firsts.append(bucket), lasts.append(bucket)
    return keys, firsts, lasts


def update_rollups(run_id: int, keys: Sequence[str], steps: Sequence[int]) -> None:
    """Recompute the rollup buckets a batch touched, level by level. LATERAL makes each touched
    range an index range scan (a join let the planner read every point of the run)."""
    touched = {(k, s // LEVELS[0]) for k, s in zip(keys, steps, strict=True)}
    with _raw_pg_cursor() as cur:
        w = LEVELS[0]
        cur.execute(
            _level_from_points(
                "FROM unnest(%b::text[], %b::int8[], %b::int8[]) AS t(key, b0, b1) CROSS JOIN LATERAL ("
                f"SELECT * FROM {POINT} q WHERE q.run_id = %s AND q.key = t.key AND NOT q.superseded "
                f"AND q.step >= t.b0 * {w} AND q.step < (t.b1 + 1) * {w} OFFSET 0) p"),
            [*_ranges(touched), run_id],
        )
        for child, width in zip(LEVELS, LEVELS[1:], strict=False):
            touched = {(k, b // FANOUT) for k, b in touched}
            cur.execute(
                _level_from_children(width,
                    "FROM unnest(%b::text[], %b::int8[], %b::int8[]) AS t(key, b0, b1) CROSS JOIN LATERAL ("
                    f"SELECT * FROM {ROLLUP} r WHERE r.run_id = %s AND r.key = t.key AND r.width = {child} "
                    f"AND r.bucket >= t.b0 * {FANOUT} AND r.bucket < (t.b1 + 1) * {FANOUT} OFFSET 0) c"),
                [*_ranges(touched), run_id],
            )


def _merged(column: str, take_new_if: str) -> str:
    return f"{column} = CASE WHEN {take_new_if} THEN excluded.{column} ELSE r.{column} END"


# Only for batches that append: their steps come after every stored point of their keys, so the
# new last point always wins and min/max ties stay with the stored (earlier) point.
_MERGE_ROLLUPS = (
    f"INSERT INTO {ROLLUP} AS r ({_ROLLUP_COLUMNS}) SELECT %s, u.* FROM unnest("
    "%b::text[], %b::int4[], %b::int8[], %b::int4[], %b::float8[], %b::int8[], %b::float8[], %b::int8[], "
    "%b::int8[], %b::float8[], %b::int2[], %b::float8[], %b::int8[], %b::int2[]) AS u "
    "ON CONFLICT (run_id, key, width, bucket) DO UPDATE SET n = r.n + excluded.n, "
    + ", ".join([
        _merged("min_value", lower := "excluded.min_value IS NOT NULL AND (r.min_value IS NULL OR excluded.min_value < r.min_value)"),
        _merged("min_step", lower),
        _merged("max_value", higher := "excluded.max_value IS NOT NULL AND (r.max_value IS NULL OR excluded.max_value > r.max_value)"),
        _merged("max_step", higher),
        *(f"{c} = excluded.{c}" for c in ("last_step", "last_value", "last_special", "last_time")),
        _merged("special_step", "excluded.special_step IS NOT NULL"),
        _merged("special_kind", "excluded.special_kind IS NOT NULL"),
    ])
)


def merge_rollups(run_id: int, rows) -> None:
    """Fold an appending batch's own bucket aggregates (batches.rollup_rows) into the stored
    rollups: one array upsert, no re-reading of stored points."""
    with _raw_pg_cursor() as cur:
        cur.execute(_MERGE_ROLLUPS, [run_id, *rows.columns()])


def rebuild_rollups(run_id: int, from_step: int = 0) -> None:
    """Rebuild every rollup bucket of a run that holds steps at or after `from_step`."""
    with _raw_pg_cursor() as cur:
        for width in LEVELS:
            cur.execute(f"DELETE FROM {ROLLUP} WHERE run_id = %s AND width = %s AND bucket >= %s",
                        [run_id, width, from_step // width])
        first = LEVELS[0]
        cur.execute(_level_from_points(f"FROM {POINT} p WHERE p.run_id = %s AND NOT p.superseded AND p.step >= %s"),
                    [run_id, from_step // first * first])
        for child, width in zip(LEVELS, LEVELS[1:], strict=False):
            cur.execute(_level_from_children(width, f"FROM {ROLLUP} c WHERE c.run_id = %s AND c.width = {child} AND c.bucket >= %s"),
                        [run_id, from_step // width * FANOUT])
