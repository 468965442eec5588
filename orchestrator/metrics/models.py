"""Metric storage.

`MetricChunk` holds every point ever posted, a batch's points of one key per row. A restart from
a checkpoint at step S marks the older attempts' points at or after S `superseded` (kept, as
Determined archives them), so the live series of a key is the points of its chunks with
`superseded = false`: one per step.

Non-finite values are kept: `value` is NULL and `special` says which one. SQLite cannot store
NaN in a REAL column (it reads back as NULL), and PostgreSQL sorts NaN above every number,
which would spoil min/max; a flag column is correct on both.

`seq` numbers the ingested batches of a run (1, 2, 3 ... with no gaps, in commit order). It is
the id of the live event that carried the batch, so a reconnecting browser asks for
`seq > Last-Event-ID` and gets exactly what it missed.
"""

from django.db import models
from django.db.models import Q

from orchestrator.experiments.models import Run

# Steps are 64-bit columns (tokens seen is a common step), bounded by 2**53 - 1: the largest integer
# a browser's numbers and the rollups' float8 arrays (selectors._ROLLUP_QUERY) hold exactly.
MAX_STEP = 2**53 - 1
MAX_KEY_LENGTH = 256  # a key is any printable text up to this long, stored exactly (schemas.key_problem)


class Special(models.IntegerChoices):
    FINITE = 0
    NAN = 1
    POS_INF = 2
    NEG_INF = 3


class MetricChunk(models.Model):
    """The points of one key that one batch brought (or the part of them still to be kept), as
    packed little-endian arrays: steps int64 (sorted, unique), values float64 (NaN where `specials`
    is not FINITE), specials int8, times float64 (store.pack/unpack).

    A batch of 50 keys x 100 steps is 50 rows, not 5,000: ingestion cost follows the number of
    keys, not of points. A trainer that posts every step leaves one-point chunks; compaction
    (store.compact_chunks, every 5 minutes) merges them once no live replay can need them. The
    live points of a (run, key) are its chunks with `superseded = false`,
    which never share a step: a re-posted step is first removed from the chunk that held it, and a
    restart at step S splits older attempts' chunks at S and marks the part from S superseded.
    """

    # No database FK constraint, as for rollups: Django's cascade still deletes a run's chunks. No
    # index of its own either: the indexes below lead with the run.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="metric_chunks", db_constraint=False, db_index=False
    )
    key = models.CharField(max_length=MAX_KEY_LENGTH)
    attempt = models.PositiveIntegerField(default=1)
    seq = models.BigIntegerField()
    superseded = models.BooleanField(default=False)
    first_step = models.BigIntegerField()
    last_step = models.BigIntegerField()
    n = models.IntegerField()
    steps = models.BinaryField()
    values = models.BinaryField()
    specials = models.BinaryField()
    times = models.BinaryField()
    # Sum and count of the finite values: a summary's tail mean adds whole chunks without
    # unpacking them (summaries.py).
    sum_value = models.FloatField(default=0.0)
    n_finite = models.IntegerField(default=0)

    class Meta:
        indexes = [
            # Step-range reads of a key (charts at full resolution, overlap checks, rollup rebuilds).
            models.Index(fields=["run", "key", "last_step"], name="metric_chunk_range", condition=Q(superseded=False)),
            # Live resume: the chunks of a run's batches after a given sequence number.
            models.Index(fields=["run", "seq"], name="metric_chunk_run_seq", condition=Q(superseded=False)),
        ]


class MetricSeries(models.Model):
    """Per (run, key): the latest point, running extremes and the number of live points; serves
    tables without touching the points. Kept up to date from each batch's own aggregates;
    recomputed when a restart supersedes points or a re-post changes a stored value."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metric_series")
    key = models.CharField(max_length=MAX_KEY_LENGTH)
    first_step = models.BigIntegerField()
    last_step = models.BigIntegerField()
    last_value = models.FloatField(null=True)
    last_special = models.SmallIntegerField(default=Special.FINITE)
    min_value = models.FloatField(null=True)  # over finite values
    max_value = models.FloatField(null=True)
    count = models.BigIntegerField(default=0)  # live points, finite or not
    # An upper bound on last_step - first_step of the key's live chunks: a batch's overlap check
    # scans the chunks ending in [first, last + max_span] only (store.remove_steps).
    max_span = models.BigIntegerField(default=0)
    # Bumped by every change of the key's points; the tail mean (summaries.py) is cached for the
    # revision it was computed at, so finished runs compute it once and filters can use the column.
    revision = models.BigIntegerField(default=0)
    tail_mean = models.FloatField(null=True)
    tail_revision = models.BigIntegerField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key"], name="metric_series_unique")]


class MetricStream(models.Model):
    """The run's batch counter. Incrementing it row-locks it until the batch commits, so
    sequence numbers become visible in order and without gaps."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="metric_stream")
    last_seq = models.BigIntegerField(default=0)


class MetricAttempt(models.Model):
    """Where each attempt's points start: the restart step S that supersedes older attempts."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metric_attempts")
    attempt = models.PositiveIntegerField()
    start_step = models.BigIntegerField()
    seq = models.BigIntegerField(default=0)  # the batch that set or last lowered start_step

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "attempt"], name="metric_attempt_unique")]


class MetricRollup(models.Model):
    """Pre-aggregated buckets of `width` steps (PostgreSQL only): min and max with their steps,
    the last point, and one non-finite point, over live points. Levels of 64 to 4096 steps
    (store.LEVELS) let a chart of 10M steps read a few thousand rows instead of the points.

    A bucket may be several partial rows, one per batch that brought points to it, until
    compaction merges them (store.py says how rows merge); readers merge them as they read."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False)
    key = models.CharField(max_length=MAX_KEY_LENGTH)
    width = models.IntegerField()
    bucket = models.BigIntegerField()  # steps [bucket * width, (bucket + 1) * width)
    n = models.IntegerField()
    min_value = models.FloatField(null=True)
    min_step = models.BigIntegerField(null=True)
    max_value = models.FloatField(null=True)
    max_step = models.BigIntegerField(null=True)
    last_step = models.BigIntegerField()
    last_value = models.FloatField(null=True)
    last_special = models.SmallIntegerField(default=Special.FINITE)
    last_time = models.FloatField()
    special_step = models.BigIntegerField(null=True)
    special_kind = models.SmallIntegerField(null=True)

    class Meta:
        indexes = [models.Index(fields=["run", "key", "width", "bucket"], name="metric_rollup_bucket")]


class RunSummary(models.Model):
    """What a run said about itself beyond its series (W&B's `run.summary` and `define_metric`):
    `values` {key: JSON value} set by the client, `definitions` {key: {step_metric, summary}}."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, primary_key=True, related_name="run_summary")
    values = models.JSONField(default=dict)
    definitions = models.JSONField(default=dict)


class RunHistogram(models.Model):
    """One logged histogram: bin edges (len(counts) + 1) and counts, at a step of a key."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="histograms")
    key = models.CharField(max_length=MAX_KEY_LENGTH)
    step = models.BigIntegerField()
    bins = models.JSONField()
    counts = models.JSONField()
    time = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key", "step"], name="run_histogram_once_per_step")]


class RunTable(models.Model):
    """One logged table: column names and rows of JSON cells, at a step of a key."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tables")
    key = models.CharField(max_length=MAX_KEY_LENGTH)
    step = models.BigIntegerField()
    columns = models.JSONField()
    rows = models.JSONField()
    time = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "key", "step"], name="run_table_once_per_step")]
