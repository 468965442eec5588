"""Metric reporting: the durable spool, the background push to the dashboard, and heartbeats.

One implementation serves the bundled trainer and the `opl` logging SDK: it lives in the client
package (client/opl_client/spool.py for the files, client/opl_client/pusher.py for the thread; their
docstrings describe the formats and the retry rules) and the trainer imports it from there. The
client package is pinned in requirements-trainer.txt; it needs only the standard library.
"""

from opl_client.pusher import (
    COMPRESS_ABOVE_BYTES,
    MAX_BACKOFF_S,
    MAX_POINTS_PER_POST,
    MAX_RETRY_AFTER_S,
    MAX_SAMPLE_BYTES_PER_POST,
    MAX_SAMPLES_PER_POST,
    PUSH_EARLY_BYTES,
    TICK_S,
    Pusher,
    retry_after,
)
from opl_client.spool import (
    OFFSET_NAME,
    SAMPLES_OFFSET_NAME,
    SAMPLES_SPOOL_NAME,
    SPOOL_NAME,
    MetricSpool,
    atomic_write_text,
    batch_body,
    json_number,
    mark_rejected,
    read_offset,
    read_rejected,
    rejected_lines,
    rejected_name,
    truncate_spool,
    write_offset,
    write_rejected,
)

__all__ = [
    "COMPRESS_ABOVE_BYTES",
    "MAX_BACKOFF_S",
    "MAX_POINTS_PER_POST",
    "MAX_RETRY_AFTER_S",
    "MAX_SAMPLE_BYTES_PER_POST",
    "MAX_SAMPLES_PER_POST",
    "OFFSET_NAME",
    "PUSH_EARLY_BYTES",
    "SAMPLES_OFFSET_NAME",
    "SAMPLES_SPOOL_NAME",
    "SPOOL_NAME",
    "TICK_S",
    "MetricSpool",
    "Pusher",
    "atomic_write_text",
    "batch_body",
    "json_number",
    "mark_rejected",
    "read_offset",
    "read_rejected",
    "rejected_lines",
    "rejected_name",
    "retry_after",
    "truncate_spool",
    "write_offset",
    "write_rejected",
]
