"""Live metric events: Redis pub/sub after each committed batch, replayed from the database.

Every batch of a run has a sequence number (`MetricChunk.seq`, gap-free per run). It is the SSE
event id, so a browser reconnecting with Last-Event-ID N receives exactly the batches after N:
from the database first, then from pub/sub, skipping anything it already got. A sequence gap
in pub/sub (a lost message, Redis down) or a quiet interval also triggers a database catch-up.
"""

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import redis
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, connection

from orchestrator.metrics.schemas import SPECIAL_NAMES
from orchestrator.metrics.store import Columns

log = logging.getLogger(__name__)
# A client further behind than this many batches reloads its charts instead of replaying.
MAX_REPLAY_BATCHES = 500
_client: redis.Redis | None = None


def release_db() -> None:
    """Close this thread's connection between a stream's reads, so an open stream holds no
    database connection (not inside a transaction, e.g. a test's)."""
    if not connection.in_atomic_block:
        close_old_connections()


def channel(run_id: int) -> str:
    return f"opl:metrics:run:{run_id}"


def _wire(value: float | None, special: int):
    return SPECIAL_NAMES[special] if special else value


def batch_event(*, seq: int, attempt: int, restart_from: int | None, cols: Columns) -> dict[str, Any]:
    """The event for one batch: its points grouped by key, each [step, value], step-ordered."""
    by_key: dict[str, list] = {}
    for key, step, value, special in zip(cols.keys, cols.steps, cols.values, cols.specials, strict=True):
        by_key.setdefault(key, []).append([step, _wire(value, special)])
    for points in by_key.values():
        points.sort(key=lambda p: p[0])
    return {"seq": seq, "attempt": attempt, "restart_from": restart_from, "points": by_key}


def publish(run_id: int, make_event: Callable[[], dict[str, Any]]) -> None:
    """Announce a committed batch to the run's open streams, if any (most runs have no viewer,
    so the event is only built when someone listens). Fire and forget: a lost message is
    recovered by the stream's database catch-up."""
    global _client
    try:
        if _client is None:
            _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
        name = channel(run_id)
        if _client.pubsub_numsub(name)[0][1]:
            _client.publish(name, json.dumps(make_event(), separators=(",", ":")))
    except (redis.RedisError, OSError) as exc:
        log.warning("metrics: could not publish a batch of run %s: %s", run_id, exc)


def events_after(run_id: int, after: int, keys: set[str] | None) -> tuple[list[dict[str, Any]], int]:
    """Batches of a run with seq > after, from the database, and the seq they bring us up to.

    Returns a single `reset` event when the client is too far behind or a restart superseded
    points since `after`: the client then reloads its series.
    """
    from orchestrator.metrics.chunks import unpack
    from orchestrator.metrics.models import MetricAttempt, MetricChunk
    from orchestrator.metrics.store import last_seq

    try:
        upto = last_seq(run_id)
        if upto <= after:
            return [], after
        restarted = MetricAttempt.objects.filter(run_id=run_id, attempt__gt=1, seq__gt=after, seq__lte=upto).exists()
        if restarted or upto - after > MAX_REPLAY_BATCHES:
            return [{"seq": upto, "type": "reset"}], upto
        rows = MetricChunk.objects.filter(run_id=run_id, superseded=False, seq__gt=after, seq__lte=upto)
        if keys is not None:
            rows = rows.filter(key__in=keys)
        events: dict[int, dict[str, Any]] = {}
        for seq, attempt, key, *blobs in rows.order_by("seq", "key").values_list(
            "seq", "attempt", "key", "steps", "values", "specials", "times"
        ):
            event = events.setdefault(seq, {"seq": seq, "attempt": attempt, "restart_from": None, "points": {}})
            event["points"][key] = [[step, _wire(value, special)] for step, value, special in unpack(*blobs).rows()]
        return list(events.values()), upto
    finally:
        release_db()


def for_client(event: dict[str, Any], keys: set[str] | None) -> dict[str, Any] | None:
    """The event as one client sees it: a reset, or only the keys it charts (None if empty)."""
    if event.get("type") == "reset" or event.get("restart_from") is not None:
        return {"seq": event["seq"], "type": "reset"}
    points = event["points"] if keys is None else {k: v for k, v in event["points"].items() if k in keys}
    if not points:
        return None
    return {"seq": event["seq"], "type": "points", "attempt": event["attempt"], "points": points}


def sse(event: dict[str, Any]) -> str:
    return f"id: {event['seq']}\nevent: {event['type']}\ndata: {json.dumps(event, separators=(',', ':'))}\n\n"


def snapshot(run_id: int, after: int, keys: set[str] | None) -> str:
    """A finite SSE body: the batches after `after` and a reconnect delay (the WSGI fallback)."""
    events, _ = events_after(run_id, after, keys)
    return "retry: 2000\n\n" + "".join(sse(out) for e in events if (out := for_client(e, keys)) is not None)


async def stream(
    run_id: int, after: int, keys: set[str] | None, *, catch_up_s: float = 5.0, ping_s: float = 15.0
) -> AsyncIterator[str]:
    """The SSE body for one client: everything after `after`, then live batches as they commit."""
    client = aioredis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2)
    pubsub = client.pubsub()
    try:
        try:
            await pubsub.subscribe(channel(run_id))
            subscribed = True
        except (redis.RedisError, OSError) as exc:
            log.warning("metrics stream of run %s: Redis unavailable, polling the database: %s", run_id, exc)
            subscribed = False
        yield "retry: 2000\n\n"
        sent = after
        catch_up = True
        quiet = 0.0
        while True:
            if catch_up:
                replay, upto = await sync_to_async(events_after)(run_id, sent, keys)
                for event in replay:
                    if (out := for_client(event, keys)) is not None:
                        yield sse(out)
                sent, catch_up = max(sent, upto), False
            message = None
            if subscribed:
                try:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=catch_up_s)
                except (redis.RedisError, OSError) as exc:
                    log.warning("metrics stream of run %s: lost Redis, polling the database: %s", run_id, exc)
                    subscribed = False
            else:
                await asyncio.sleep(catch_up_s)
            if message is None:
                catch_up = True
                quiet += catch_up_s
                if quiet >= ping_s:
                    quiet = 0.0
                    yield ": ping\n\n"
                continue
            quiet = 0.0
            event = json.loads(message["data"])
            if event["seq"] <= sent:
                continue
            if event["seq"] != sent + 1:
                catch_up = True  # a batch is missing from pub/sub: read it from the database
                continue
            sent = event["seq"]
            if (out := for_client(event, keys)) is not None:
                yield sse(out)
    finally:
        try:
            await pubsub.aclose()
            await client.aclose()
        except (redis.RedisError, OSError):
            pass
