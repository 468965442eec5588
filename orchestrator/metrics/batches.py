"""A validated batch as key-then-step sorted arrays, and what storage derives from it in one numpy
pass, as columns ready to be sent (rows.py): the chunk of each key, per-key summaries, and the
rollup buckets of every level. Computing these from the batch instead of re-reading stored points
keeps a batch's database work to its own writes.

Nullable aggregates use the sentinels rows.py reads back through NULLIF: NaN for a float, -1 for a
step or a kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from orchestrator.metrics.chunks import SPECIAL, STEP, TIME, VALUE, Columns, Points
from orchestrator.metrics.downsample import GroupAggregates, aggregate_groups


@dataclass(frozen=True)
class SortedBatch:
    key_names: list[str]  # distinct keys; key_index points into it
    key_index: np.ndarray
    steps: np.ndarray
    values: np.ndarray  # NaN where specials != 0
    specials: np.ndarray
    times: np.ndarray

    def __len__(self) -> int:
        return len(self.steps)

    def key_starts(self) -> np.ndarray:
        return np.r_[0, np.flatnonzero(np.diff(self.key_index)) + 1] if len(self.steps) else np.empty(0, np.int64)

    def key_ranges(self) -> dict[str, tuple[int, int]]:
        """{key: (start, end)} index ranges of each key's points."""
        starts = self.key_starts()
        ends = np.r_[starts[1:], len(self.steps)]
        return {self.key_names[self.key_index[a]]: (a, b) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)}

    def by_key(self) -> dict[str, Points]:
        """Each key's points (views into the batch)."""
        return {
            key: Points(self.steps[a:b], self.values[a:b], self.specials[a:b], self.times[a:b])
            for key, (a, b) in self.key_ranges().items()
        }

    def where(self, mask: np.ndarray) -> SortedBatch:
        """The points where mask is true (still key-then-step sorted)."""
        if mask.all():
            return self
        return SortedBatch(
            self.key_names,
            self.key_index[mask],
            self.steps[mask],
            self.values[mask],
            self.specials[mask],
            self.times[mask],
        )

    def only(self, keys: set[str]) -> SortedBatch:
        """The points of some of the keys."""
        wanted = [i for i, k in enumerate(self.key_names) if k in keys]
        return self.where(np.isin(self.key_index, wanted))


def sort_batch(cols: Columns) -> SortedBatch:
    names: dict[str, int] = {}
    key_index = np.fromiter((names.setdefault(k, len(names)) for k in cols.keys), dtype=np.int64, count=len(cols.keys))
    steps = np.asarray(cols.steps, dtype=np.int64)
    order = np.lexsort((steps, key_index))
    return SortedBatch(
        key_names=list(names),
        key_index=key_index[order],
        steps=steps[order],
        values=np.asarray(cols.values, dtype=VALUE)[order],  # None becomes NaN
        specials=np.asarray(cols.specials, dtype=SPECIAL)[order],
        times=np.asarray(cols.times, dtype=TIME)[order],
    )


def from_points(series: dict[str, Points]) -> SortedBatch:
    """Stored points of several keys as one batch, to aggregate them like an incoming one."""
    parts = list(series.values())
    return SortedBatch(
        key_names=list(series),
        key_index=np.repeat(np.arange(len(parts)), [len(p) for p in parts]),
        steps=np.concatenate([p.steps for p in parts]) if parts else np.empty(0, STEP),
        values=np.concatenate([p.values for p in parts]) if parts else np.empty(0, VALUE),
        specials=np.concatenate([p.specials for p in parts]) if parts else np.empty(0, SPECIAL),
        times=np.concatenate([p.times for p in parts]) if parts else np.empty(0, TIME),
    )


def _groups(batch: SortedBatch, width: int | None) -> tuple[np.ndarray, GroupAggregates]:
    """Start index of each (key, step // width) group (each key when width is None), and its aggregates."""
    change = np.diff(batch.key_index) != 0
    if width is not None:
        change |= np.diff(batch.steps // width) != 0
    starts = np.r_[0, np.flatnonzero(change) + 1]
    return starts, aggregate_groups(starts, batch.steps, batch.values, batch.specials, batch.times)


def _or_nan(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    return np.where(present, values, np.nan)


def _or_minus_one(values: np.ndarray, present: np.ndarray) -> np.ndarray:
    return np.where(present, values, -1)


# --- what storage writes for a batch, as columns -------------------------------------------------

CHUNK_COLUMNS = (
    ("key", "text"),
    ("first_step", "int8"),
    ("last_step", "int8"),
    ("n", "int4"),
    ("steps", "bytea"),
    ("values", "bytea"),
    ("specials", "bytea"),
    ("times", "bytea"),
    ("sum_value", "float8"),
    ("n_finite", "int4"),
)


def chunk_columns(batch: SortedBatch) -> list:
    """One chunk per key (models.MetricChunk's packed arrays), in CHUNK_COLUMNS order."""
    starts = batch.key_starts()
    ends = np.r_[starts[1:], len(batch.steps)]
    finite = batch.specials == 0
    packed = [
        (batch.steps.astype(STEP).tobytes(), 8),
        (batch.values.astype(VALUE).tobytes(), 8),
        (batch.specials.astype(SPECIAL).tobytes(), 1),
        (batch.times.astype(TIME).tobytes(), 8),
    ]
    a_list, b_list = starts.tolist(), ends.tolist()
    blobs = [[buf[a * size : b * size] for a, b in zip(a_list, b_list, strict=True)] for buf, size in packed]
    return [
        [batch.key_names[i] for i in batch.key_index[starts].tolist()],
        batch.steps[starts],
        batch.steps[ends - 1],
        ends - starts,
        *blobs,
        np.add.reduceat(np.where(finite, batch.values, 0.0), starts),
        np.add.reduceat(finite.astype(np.int64), starts),
    ]


SUMMARY_COLUMNS = (
    ("key", "text"),
    ("first_step", "int8"),
    ("last_step", "int8"),
    ("last_value", "float8"),
    ("last_special", "int2"),
    ("min_value", "float8"),
    ("max_value", "float8"),
    ("count", "int8"),
    ("span", "int8"),
)


def key_summaries(batch: SortedBatch) -> list:
    """Per key: first and last step, last point, finite min and max, count, and span (the width of
    the chunk the batch stores for the key), in SUMMARY_COLUMNS order."""
    if not len(batch.steps):
        return [[] for _ in SUMMARY_COLUMNS]
    starts, g = _groups(batch, None)
    firsts = batch.steps[starts]
    return [
        [batch.key_names[i] for i in batch.key_index[starts].tolist()],
        firsts,
        g.last_step,
        _or_nan(g.last_value, g.last_special == 0),
        g.last_special,
        _or_nan(g.min_value, g.has_finite),
        _or_nan(g.max_value, g.has_finite),
        g.n,
        g.last_step - firsts,
    ]


ROLLUP_COLUMNS = (
    ("key", "text"),
    ("width", "int4"),
    ("bucket", "int8"),
    ("n", "int4"),
    ("min_value", "float8"),
    ("min_step", "int8"),
    ("max_value", "float8"),
    ("max_step", "int8"),
    ("last_step", "int8"),
    ("last_value", "float8"),
    ("last_special", "int2"),
    ("last_time", "float8"),
    ("special_step", "int8"),
    ("special_kind", "int2"),
)


def rollup_columns(batch: SortedBatch, levels: tuple[int, ...]) -> list:
    """The batch's rollup buckets of every level, in ROLLUP_COLUMNS order."""
    parts: list[list] = [[] for _ in ROLLUP_COLUMNS]
    for width in levels:
        starts, g = _groups(batch, width)
        for i, column in enumerate(
            (
                batch.key_index[starts],
                np.full(len(starts), width),
                batch.steps[starts] // width,
                g.n,
                _or_nan(g.min_value, g.has_finite),
                _or_minus_one(g.min_step, g.has_finite),
                _or_nan(g.max_value, g.has_finite),
                _or_minus_one(g.max_step, g.has_finite),
                g.last_step,
                _or_nan(g.last_value, g.last_special == 0),
                g.last_special,
                g.last_time,
                _or_minus_one(g.special_step, g.has_special),
                _or_minus_one(g.special_kind, g.has_special),
            )
        ):
            parts[i].append(column)
    columns = [np.concatenate(p) if p else np.empty(0) for p in parts]
    columns[0] = [batch.key_names[i] for i in columns[0].tolist()]
    return columns
