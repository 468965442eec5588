"""Points as packed arrays (the storage form of models.MetricChunk), a validated batch as columns,
and reading live points back. The bottom of the metrics app: it imports only its models."""

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from orchestrator.metrics.models import MAX_STEP, MetricChunk

STEP = np.dtype("<i8")
VALUE = np.dtype("<f8")
SPECIAL = np.dtype("i1")
TIME = np.dtype("<f8")


@dataclass(frozen=True)
class Columns:
    """A deduplicated batch as parallel columns; `values` holds None where `specials` is not 0."""

    keys: list[str]
    steps: list[int]
    values: list[float | None]
    specials: list[int]
    times: list[float]


def as_float(value: float | None, special: int) -> float:
    """A stored value as a Python float (NaN and ±inf restored)."""
    if special:
        return {1: math.nan, 2: math.inf, 3: -math.inf}[special]
    return math.nan if value is None else value


@dataclass(frozen=True)
class Points:
    """Step-sorted points of one key: values are NaN where specials != 0."""

    steps: np.ndarray
    values: np.ndarray
    specials: np.ndarray
    times: np.ndarray

    def __len__(self) -> int:
        return len(self.steps)

    def take(self, selector) -> "Points":
        return Points(self.steps[selector], self.values[selector], self.specials[selector], self.times[selector])

    def rows(self) -> list[tuple[int, float | None, int]]:
        """(step, value, special) tuples; value None where the point is NaN or ±inf."""
        return [
            (s, None if sp else v, sp)
            for s, v, sp in zip(self.steps.tolist(), self.values.tolist(), self.specials.tolist(), strict=True)
        ]

    @staticmethod
    def empty() -> "Points":
        return Points(np.empty(0, STEP), np.empty(0, VALUE), np.empty(0, SPECIAL), np.empty(0, TIME))

    @staticmethod
    def join(parts: list["Points"]) -> "Points":
        """One step-sorted series of parts whose steps do not overlap (a key's live chunks)."""
        if not parts:
            return Points.empty()
        if len(parts) == 1:
            return parts[0]
        joined = Points(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in ("steps", "values", "specials", "times"))
        )
        return joined.take(np.argsort(joined.steps, kind="stable"))


def pack(points: Points) -> dict[str, bytes]:
    return {
        "steps": points.steps.astype(STEP).tobytes(),
        "values": points.values.astype(VALUE).tobytes(),
        "specials": points.specials.astype(SPECIAL).tobytes(),
        "times": points.times.astype(TIME).tobytes(),
    }


def unpack(steps, values, specials, times) -> Points:
    return Points(
        np.frombuffer(steps, STEP),
        np.frombuffer(values, VALUE),
        np.frombuffer(specials, SPECIAL),
        np.frombuffer(times, TIME),
    )


def live_points(
    run_ids: Iterable[int], keys: Iterable[str] | None = None, *, lo: int | None = None, hi: int | None = None
) -> dict[tuple[int, str], Points]:
    """{(run_id, key): live points with lo <= step <= hi}, only for pairs that have some."""
    rows = MetricChunk.objects.filter(run_id__in=list(run_ids), superseded=False)
    if keys is not None:
        rows = rows.filter(key__in=list(keys))
    if lo is not None:
        rows = rows.filter(last_step__gte=lo)
    if hi is not None:
        rows = rows.filter(first_step__lte=hi)
    parts: dict[tuple[int, str], list[Points]] = {}
    for run_id, key, *blobs in rows.values_list("run_id", "key", "steps", "values", "specials", "times"):
        parts.setdefault((run_id, key), []).append(unpack(*blobs))
    out = {}
    for pair, chunks in parts.items():
        points = Points.join(chunks)
        if lo is not None or hi is not None:
            points = points.take(
                (points.steps >= (-1 if lo is None else lo)) & (points.steps <= (MAX_STEP if hi is None else hi))
            )
        if len(points):
            out[pair] = points
    return out


def live_series(
    run_id: int, keys: Iterable[str] | None = None, *, lo: int | None = None, hi: int | None = None
) -> dict[str, Points]:
    """live_points of one run, by key."""
    return {key: points for (_, key), points in live_points([run_id], keys, lo=lo, hi=hi).items()}


def live_rows(run_id: int, key: str) -> list[tuple[int, float | None, int]]:
    """Every live (step, value, special) of a key, in step order."""
    points = live_points([run_id], [key]).get((run_id, key))
    return points.rows() if points is not None else []
