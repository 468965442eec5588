"""Admission of ingestion requests: a per-run count of the batches queued in this server process,
gzip request bodies, and the 429 answer a trainer backs off on.

Under ASGI, Django runs sync views one at a time per worker process, so batches that arrive
faster than a run can store them queue in the process. Counting them before they wait lets the
endpoint answer "429 Too Many Requests" with Retry-After at once when a run's queue is deep,
instead of letting the trainer's request time out; the trainer's spool keeps the points and its
pusher retries after the delay (trainer/reporting.py). Nothing is lost either way.
"""
from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.http import HttpRequest, JsonResponse

from orchestrator.api import json_error

_lock = threading.Lock()
_queued: dict[int, int] = {}
# A gzip body may inflate to at most this many bytes (a 200,000-point batch is about 16 MB of JSON).
DEFAULT_MAX_INFLATED_BYTES = 64 * 1024 * 1024


def max_inflated_bytes() -> int:
    return int(getattr(settings, "OPL_INGEST_MAX_INFLATED_BYTES", DEFAULT_MAX_INFLATED_BYTES))


def limit() -> int:
    """Batches of one run that may be queued or in progress in this process."""
    return int(getattr(settings, "OPL_INGEST_MAX_QUEUED", 16))


def retry_after_s() -> int:
    return int(getattr(settings, "OPL_INGEST_RETRY_AFTER_S", 1))


@contextmanager
def slot(run_id: int) -> Iterator[bool]:
    """True while this request holds one of the run's queue places; False when none was free."""
    with _lock:
        held = _queued.get(run_id, 0)
        admitted = held < limit()
        if admitted:
            _queued[run_id] = held + 1
    try:
        yield admitted
    finally:
        if admitted:
            with _lock:
                left = _queued[run_id] - 1
                if left:
                    _queued[run_id] = left
                else:
                    del _queued[run_id]


def busy_response(why: str) -> JsonResponse:
    response = json_error(429, f"busy: {why}; nothing was stored, retry after {retry_after_s()} s")
    response["Retry-After"] = str(retry_after_s())
    return response


def request_body(request: HttpRequest) -> tuple[bytes | None, JsonResponse | None]:
    """The request body, inflated when it is sent with Content-Encoding: gzip (the inflated body
    then replaces request.body for the JSON parsers); or a 400/413 naming the problem."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return request.body, None
    if encoding != "gzip":
        return None, json_error(415, f"Content-Encoding {encoding[:40]!r} is not supported: send gzip or none")
    inflater, most = zlib.decompressobj(wbits=31), max_inflated_bytes()  # wbits: gzip header and trailer
    try:
        raw = inflater.decompress(request.body, most)
        if inflater.unconsumed_tail:
            return None, json_error(413, f"body inflates to more than {most} bytes")
        if not inflater.eof:
            return None, json_error(400, "body is not a complete gzip stream")
    except zlib.error as exc:
        return None, json_error(400, f"body is not valid gzip: {exc}")
    request._body = raw
    return raw, None
