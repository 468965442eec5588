"""How other apps join ingestion without metrics importing them: a registry that metrics owns.

An app that must act on ingested batches (alerts) registers a factory from its AppConfig.ready():

    ingest_hooks.register(factory)    # factory(run, incoming) -> a Rider, or None to sit this batch out

`incoming` is the batch's step-sorted chunks.Points per key. A rider's `send_reads(conn)` is
queued in the write path's first round trip, after the run's batch lock; its `send_writes(cur)`
in the last one, before COMMIT, so that what it writes commits or rolls back with the batch
(PostgreSQL only: on SQLite there are no round trips to share, and neither is called).
`after_commit(run=..., cols=...)` is called once the batch is stored, outside its transaction,
on every database; it must not raise into ingestion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Rider(Protocol):
    def send_reads(self, conn: Any) -> None: ...

    def send_writes(self, cursor: Any) -> None: ...

    def after_commit(self, *, run: Any, cols: Any) -> None: ...


_factories: list[Callable[[Any, dict], Rider | None]] = []


def register(factory: Callable[[Any, dict], Rider | None]) -> None:
    if factory not in _factories:
        _factories.append(factory)


def riders_for(run, incoming: dict) -> list[Rider]:
    return [rider for factory in _factories if (rider := factory(run, incoming)) is not None]
