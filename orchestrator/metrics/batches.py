"""A validated batch as key-then-step sorted arrays, and what ingestion derives from it in one pass:
per-key summaries and, for a batch that only appends, the rollup buckets to merge into storage.

Computing aggregates here instead of re-reading the stored points keeps ingestion's database work
to the writes themselves.
"""
from dataclasses import dataclass

import numpy as np

from orchestrator.metrics.chunks import SPECIAL, STEP, TIME, VALUE, Points
from orchestrator.metrics.downsample import GroupAggregates, aggregate_groups
from orchestrator.metrics.store import Columns


@dataclass(frozen=True)
class SortedBatch:
    key_names: list[str]  # distinct keys; key_index points into it
    key_index: np.ndarray
    steps: np.ndarray
    values: np.ndarray  # NaN where specials != 0
    specials: np.ndarray
    times: np.ndarray

    def key_starts(self) -> np.ndarray:
        return np.r_[0, np.flatnonzero(np.diff(self.key_index)) + 1]

    def only(self, keys: set[str]) -> "SortedBatch":
        """The points of some of the keys (all when keys covers them)."""
        if len(keys) == len(self.key_names):
            return self
        wanted = np.isin(self.key_index, [i for i, k in enumerate(self.key_names) if k in keys])
        return SortedBatch(self.key_names, self.key_index[wanted], self.steps[wanted], self.values[wanted],
                           self.specials[wanted], self.times[wanted])

    def where(self, mask: np.ndarray) -> "SortedBatch":
        """The points where mask is true (still key-then-step sorted)."""
        return SortedBatch(self.key_names, self.key_index[mask], self.steps[mask], self.values[mask],
                           self.specials[mask], self.times[mask])

    def key_ranges(self) -> dict[str, tuple[int, int]]:
        """{key: (start, end)} index ranges of each key's points."""
        if not len(self.steps):
            return {}
        starts = self.key_starts()
        ends = np.r_[starts[1:], len(self.steps)]
        return {self.key_names[self.key_index[a]]: (a, b) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)}

    def by_key(self) -> dict[str, Points]:
        """Each key's points (views into the batch)."""
        starts = self.key_starts()
        ends = np.r_[starts[1:], len(self.steps)]
        return {self.key_names[self.key_index[a]]: Points(self.steps[a:b], self.values[a:b], self.specials[a:b],
                                                          self.times[a:b])
                for a, b in zip(starts.tolist(), ends.tolist(), strict=True)}


def from_points(series: dict[str, Points]) -> SortedBatch:
    """Stored points of several keys as one batch, to aggregate them like an incoming one."""
    names = list(series)
    parts = list(series.values())
    return SortedBatch(
        key_names=names,
        key_index=np.repeat(np.arange(len(parts)), [len(p) for p in parts]),
        steps=np.concatenate([p.steps for p in parts]) if parts else np.empty(0, STEP),
        values=np.concatenate([p.values for p in parts]) if parts else np.empty(0, VALUE),
        specials=np.concatenate([p.specials for p in parts]) if parts else np.empty(0, SPECIAL),
        times=np.concatenate([p.times for p in parts]) if parts else np.empty(0, TIME),
    )


def sort_batch(cols: Columns) -> SortedBatch:
    names: dict[str, int] = {}
    key_index = np.fromiter((names.setdefault(k, len(names)) for k in cols.keys), dtype=np.int64,
                            count=len(cols.keys))
    steps = np.asarray(cols.steps, dtype=np.int64)
    order = np.lexsort((steps, key_index))
    return SortedBatch(
        key_names=list(names), key_index=key_index[order], steps=steps[order],
        values=np.asarray(cols.values, dtype=VALUE)[order],  # None becomes NaN
        specials=np.asarray(cols.specials, dtype=SPECIAL)[order],
        times=np.asarray(cols.times, dtype=TIME)[order],
    )


def _groups(batch: SortedBatch, width: int | None) -> tuple[np.ndarray, GroupAggregates]:
    """Start index of each (key, step // width) group (each key when width is None), and its aggregates."""
    change = np.diff(batch.key_index) != 0
    if width is not None:
        change |= np.diff(batch.steps // width) != 0
    starts = np.r_[0, np.flatnonzero(change) + 1]
    return starts, aggregate_groups(starts, batch.steps, batch.values, batch.specials, batch.times)


def _nullable(values: np.ndarray, present: np.ndarray) -> list:
    return [v if p else None for v, p in zip(values.tolist(), present.tolist(), strict=True)]


def key_summaries(batch: SortedBatch) -> list[tuple]:
    """Per key: (key, first_step, last_step, last_value, last_special, min, max, count, span), the
    shape store.upsert_series folds into the stored summaries; span is last_step - first_step, the
    width of the chunk the batch stores for the key."""
    if not len(batch.steps):
        return []
    starts, g = _groups(batch, None)
    names = [batch.key_names[i] for i in batch.key_index[starts].tolist()]
    firsts = batch.steps[starts]
    return list(zip(names, firsts.tolist(), g.last_step.tolist(),
                    _nullable(g.last_value, g.last_special == 0), g.last_special.tolist(),
                    _nullable(g.min_value, g.has_finite), _nullable(g.max_value, g.has_finite),
                    g.n.tolist(), (g.last_step - firsts).tolist(), strict=True))


@dataclass(frozen=True)
class RollupRows:
    """Rollup buckets of one batch for every level, as columns ready for an array insert."""

    keys: list[str]
    widths: list[int]
    buckets: list[int]
    n: list[int]
    min_value: list
    min_step: list
    max_value: list
    max_step: list
    last_step: list[int]
    last_value: list
    last_special: list[int]
    last_time: list[float]
    special_step: list
    special_kind: list

    def columns(self) -> list[list]:
        return [getattr(self, f) for f in self.__dataclass_fields__]


def rollup_rows(batch: SortedBatch, levels: tuple[int, ...]) -> RollupRows:
    parts: dict[str, list] = {f: [] for f in RollupRows.__dataclass_fields__}
    for width in levels:
        starts, g = _groups(batch, width)
        parts["keys"] += [batch.key_names[i] for i in batch.key_index[starts].tolist()]
        parts["widths"] += [width] * len(starts)
        parts["buckets"] += (batch.steps[starts] // width).tolist()
        parts["n"] += g.n.tolist()
        parts["min_value"] += _nullable(g.min_value, g.has_finite)
        parts["min_step"] += _nullable(g.min_step, g.has_finite)
        parts["max_value"] += _nullable(g.max_value, g.has_finite)
        parts["max_step"] += _nullable(g.max_step, g.has_finite)
        parts["last_step"] += g.last_step.tolist()
        parts["last_value"] += _nullable(g.last_value, g.last_special == 0)
        parts["last_special"] += g.last_special.tolist()
        parts["last_time"] += g.last_time.tolist()
        parts["special_step"] += _nullable(g.special_step, g.has_special)
        parts["special_kind"] += _nullable(g.special_kind, g.has_special)
    return RollupRows(**parts)
