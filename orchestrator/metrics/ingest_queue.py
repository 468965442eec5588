"""Admission of ingestion requests (metric and sample batches), each check before anything that
costs more: the run's token (headers only, the body unread), the declared body size, a place in
the run's queue, and only then the body, read up to its limit and inflated under a size and ratio
cap. Limits come from settings (docs/OPERATIONS.md, "Ingestion limits"); each refusal is JSON naming its limit.

The queue: under ASGI, Django runs sync views one at a time per worker process, so batches that
arrive faster than a run can store them queue in the process. Counting them before they wait lets
the endpoint answer "429 Too Many Requests" with Retry-After at once when a run's queue is deep,
instead of letting the trainer's request time out; the trainer's spool keeps the points and its
pusher retries after the delay (trainer/reporting.py). Nothing is lost either way. Only requests
that carry the run's own token take a place: anonymous posts (a gzip bomb, say) are refused
before they could fill a real trainer's queue.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from orchestrator.experiments.models import Run
from orchestrator.lib.api import body_too_large, json_error
from orchestrator.metrics.access import authenticated_run

_lock = threading.Lock()
_queued: dict[int, int] = {}
# A gzip body may always inflate to this much, whatever its ratio: a small batch's ratio means little.
RATIO_FLOOR_BYTES = 1 << 20

Ingest = Callable[[HttpRequest, Run, bytes], HttpResponse]


def limit() -> int:
    """Batches of one run that may be queued or in progress in this process."""
    return int(settings.OPL_INGEST_MAX_QUEUED)


def retry_after_s() -> int:
    return int(settings.OPL_INGEST_RETRY_AFTER_S)


async def admit(request: HttpRequest, run_id: int, ingest: Ingest) -> HttpResponse:
    """Run `ingest(request, run, body)` in the worker thread once the request has passed every
    check (module docstring); else the refusal (401/403/404, 413, 429, 400/415 for the encoding)."""
    run, _, error = await sync_to_async(authenticated_run)(request, run_id, parse_body=False)
    if error:
        return error
    most, declared = max_body_bytes(), _content_length(request)
    if declared is not None and declared > most:
        return body_too_large(most, "OPL_INGEST_MAX_BODY_BYTES", declared)
    with slot(run_id) as admitted:
        if not admitted:
            return busy_response(f"run {run_id} has {limit()} batches queued in this server")
        return await sync_to_async(_read_then_ingest)(request, run, ingest)


def _read_then_ingest(request: HttpRequest, run: Run, ingest: Ingest) -> HttpResponse:
    raw, error = request_body(request)
    return error if error else ingest(request, run, raw)


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


def max_body_bytes() -> int:
    return int(settings.OPL_INGEST_MAX_BODY_BYTES)


def _content_length(request: HttpRequest) -> int | None:
    try:
        return int(request.META.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None


def request_body(request: HttpRequest) -> tuple[bytes | None, JsonResponse | None]:
    """The request body, at most OPL_INGEST_MAX_BODY_BYTES as sent (Django's own, lower
    DATA_UPLOAD_MAX_MEMORY_SIZE is not used here), inflated when it is sent with Content-Encoding:
    gzip; the result also replaces request.body for the JSON parsers. Or a 400/413/415 naming why."""
    most = max_body_bytes()
    raw = request.read(most + 1)  # also bounds a body sent without Content-Length
    if len(raw) > most:
        return None, body_too_large(most, "OPL_INGEST_MAX_BODY_BYTES")
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding == "gzip":
        raw, error = _inflate(raw)
        if error:
            return None, error
    elif encoding not in ("", "identity"):
        return None, json_error(415, f"Content-Encoding {encoding[:40]!r} is not supported: send gzip or none")
    request._body = raw
    return raw, None


def _inflate(raw: bytes) -> tuple[bytes | None, JsonResponse | None]:
    """A gzip body inflated to at most OPL_INGEST_MAX_INFLATED_BYTES and OPL_INGEST_MAX_INFLATE_RATIO
    times its own size (a trainer's batches inflate 7-40x; a gzip bomb about 1,000x): it stops at
    the cap, never holding more."""
    size_cap, ratio = int(settings.OPL_INGEST_MAX_INFLATED_BYTES), int(settings.OPL_INGEST_MAX_INFLATE_RATIO)
    cap = min(size_cap, max(ratio * len(raw), RATIO_FLOOR_BYTES))
    inflater = zlib.decompressobj(wbits=31)  # wbits: gzip header and trailer
    try:
        inflated = inflater.decompress(raw, cap)
        if inflater.unconsumed_tail:
            why = (
                f"OPL_INGEST_MAX_INFLATED_BYTES is {size_cap:,}"
                if cap == size_cap
                else f"OPL_INGEST_MAX_INFLATE_RATIO allows {ratio}x its {len(raw):,} bytes"
            )
            return None, json_error(
                413,
                f"body inflates to more than {cap:,} bytes ({why}): send less per request",
                [{"field": "(body)", "message": f"inflates to at most {cap} bytes"}],
            )
        if not inflater.eof:
            return None, json_error(400, "body is not a complete gzip stream")
    except zlib.error as exc:
        return None, json_error(400, f"body is not valid gzip: {exc}")
    return inflated, None
