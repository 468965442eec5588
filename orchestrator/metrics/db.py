"""How metric storage talks to the database: statements on Django's default connection, sent in
round trips.

On PostgreSQL they go through psycopg's own cursors (server-side binding, so rows.py's packed
arrays travel in binary); with `pipelined=True` they are queued in psycopg's pipeline mode and
sent together at each `sync()`, so a batch's reads cost one round trip and its writes another. On
SQLite (the demo, in-process) each statement runs at once through Django's cursor; `sync()` does
nothing. The statements are the same; only rows.py's row sources differ.
"""

from __future__ import annotations

from contextlib import ExitStack

import psycopg
from django.db import connection

from orchestrator.metrics import rows


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


class Result:
    """A statement's answer: rows after the round trip that carried it."""

    def __init__(self, cursor=None, rows: list | None = None):
        self._cursor, self._rows = cursor, rows

    def rows(self) -> list[tuple]:
        if self._rows is None:
            self._rows = self._cursor.fetchall() if self._cursor.description else []
        return self._rows

    def one(self):
        rows = self.rows()
        return rows[0] if rows else None


class Statements:
    def __init__(self, *, pipelined: bool = False):
        self.postgres = is_postgres()
        self.pipelined = pipelined and self.postgres
        self._stack = ExitStack()
        self.pipeline = None
        connection.ensure_connection()
        self.conn = connection.connection
        if self.postgres:
            rows.register(self.conn)

    def __enter__(self) -> Statements:
        if self.pipelined:
            self.pipeline = self._stack.enter_context(self.conn.pipeline())
        return self

    def __exit__(self, *exc) -> None:
        self._stack.__exit__(*exc)  # leaving the pipeline sends what is queued and waits for it

    def cursor(self):
        return psycopg.Cursor(self.conn) if self.postgres else connection.cursor()

    def execute(self, sql: str, params=()) -> Result:
        if self.postgres:
            cur = psycopg.Cursor(self.conn)
            cur.execute(sql, params)
            return Result(cur) if self.pipelined else Result(rows=cur.fetchall() if cur.description else [])
        with connection.cursor() as cur:
            cur.execute(sql, params)
            return Result(rows=cur.fetchall() if cur.description else [])

    def fetch(self, sql: str, params=()) -> list[tuple]:
        """Rows of one statement now (with what is queued: one round trip)."""
        result = self.execute(sql, params)
        self.sync()
        return result.rows()

    def sync(self) -> None:
        if self.pipeline is not None:
            self.pipeline.sync()


def direct() -> Statements:
    """Statements run one at a time (compaction, rebuilds, migrations), in the caller's transaction."""
    return Statements(pipelined=False)
