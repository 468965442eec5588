"""Sweep specifications: from a compact spec to the list of grid points, with generated names.

A sweep maps dotted RunConfig paths to values, given as
  - a list:         {"staleness.k": [0, 16, 64, 256]}
  - a linear range: {"algorithm.lr": {"linear": [1e-4, 5e-4, 5]}}   (start, stop, count; both ends kept)
  - a log range:    {"algorithm.lr": {"log": [1e-6, 1e-4, 3]}}
Together they make a grid (the cartesian product). A random search adds N samples, each drawing
every listed field from its distribution (uniform, loguniform, randint, choice), with a fixed seed
so the same spec always expands to the same runs. Each point is then repeated for seeds 1..k.

Staleness may be swept in optimizer updates, the paper's s, instead of batches:
{"staleness.s": [0, 8, 32]} becomes {"staleness.k": [0, 4, 16]} at 2 updates per step
(s = k x updates_per_step x epochs; see `staleness_in_updates`).

Counting happens before expanding, so a sweep over the limit is refused without building it.
"""

from __future__ import annotations

import math
import random as _random
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from orchestrator.experiments.runconfig import ConfigError
from trainer import vocabulary
from trainer.vocabulary import updates_per_step


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LinearRange(_Strict):
    linear: tuple[float, float, int] = Field(description="start, stop, count: evenly spaced, both ends kept")


class LogRange(_Strict):
    log: tuple[float, float, int] = Field(description="start, stop, count: evenly spaced in log, both > 0")


SweepValues = list[Any] | LinearRange | LogRange


class Distribution(_Strict):
    """Exactly one of the keys."""

    uniform: tuple[float, float] | None = None
    loguniform: tuple[float, float] | None = None
    randint: tuple[int, int] | None = Field(default=None, description="low, high: both included, low <= high")
    choice: list[Any] | None = None

    @model_validator(mode="after")
    def _ordered_bounds(self):
        for kind in ("uniform", "loguniform", "randint"):
            bounds = getattr(self, kind)
            if bounds is not None and bounds[0] > bounds[1]:
                raise ValueError(f"{kind}: low {bounds[0]} is greater than high {bounds[1]}")
        if self.loguniform is not None and min(self.loguniform) <= 0:
            raise ValueError("loguniform needs bounds > 0")
        return self


class RandomSearch(_Strict):
    samples: int = Field(ge=1, description="how many random points to draw")
    seed: int = Field(default=0, description="seed of the draw: the same spec gives the same runs")
    params: dict[str, Distribution] = Field(min_length=1)


class SweepSpec(_Strict):
    """A sweep: grid fields, an optional random search, and seeds per point."""

    grid: dict[str, SweepValues] = Field(default_factory=dict)
    random: RandomSearch | None = None
    seeds: int = Field(default=1, ge=1, le=1000)


@dataclass(frozen=True)
class Point:
    values: dict[str, Any]  # dotted path -> value (grid and random fields)
    seed_offset: int  # 0 .. seeds-1


def parse_sweep(grid: dict[str, Any] | None, random: dict[str, Any] | None, seeds: int) -> SweepSpec:
    """Validate the raw parts of a sweep; errors name `sweep.<path>`, `random.<...>` or `seeds`."""
    empty = [path for path, values in (grid or {}).items() if values == []]
    if empty:
        raise ConfigError([{"field": f"sweep.{path}", "message": "give at least one value"} for path in empty])
    try:
        return SweepSpec.model_validate({"grid": grid or {}, "random": random or None, "seeds": seeds})
    except ValidationError as exc:
        errors, grid_paths = [], []
        for err in exc.errors(include_url=False):
            loc = [str(p) for p in err["loc"]]
            if loc and loc[0] == "grid" and len(loc) > 1:
                # one message per field instead of one per union member pydantic tried
                if loc[1] not in grid_paths:
                    grid_paths.append(loc[1])
                    message = err["msg"] if err["type"] == "value_error" else GRID_SHAPES
                    errors.append({"field": f"sweep.{loc[1]}", "message": message.removeprefix("Value error, ")})
                continue
            errors.append({"field": ".".join(loc) or "sweep", "message": err["msg"].removeprefix("Value error, ")})
        raise ConfigError(errors) from None


GRID_SHAPES = "give a list of values, {linear: [start, stop, count]} or {log: [start, stop, count]}"


def grid_values(path: str, spec: Any) -> list[Any]:
    if isinstance(spec, list):
        return spec
    if isinstance(spec, LinearRange):
        start, stop, num = spec.linear
        _check_count(path, num)
        values = [start + (stop - start) * i / (num - 1) for i in range(num)] if num > 1 else [start]
        return [_tidy(v, integral=float(start).is_integer() and float(stop).is_integer()) for v in values]
    start, stop, num = spec.log
    _check_count(path, num)
    if start <= 0 or stop <= 0:
        raise ConfigError([{"field": f"sweep.{path}", "message": "a log range needs start and stop > 0"}])
    lo, hi = math.log10(start), math.log10(stop)
    try:
        values = [10 ** (lo + (hi - lo) * i / (num - 1)) for i in range(num)] if num > 1 else [start]
    except OverflowError:
        raise ConfigError([{"field": f"sweep.{path}", "message": "the range overflows a float"}]) from None
    return [_tidy(v) for v in values]


def _check_count(path: str, num: int) -> None:
    if num < 1:
        raise ConfigError([{"field": f"sweep.{path}", "message": "the count must be at least 1"}])


def _tidy(value: float, integral: bool = False) -> int | float:
    """Round away float noise (1.0000000000000002e-05 -> 1e-05); whole ranges stay integers."""
    if integral and float(value).is_integer():
        return int(value)
    return float(f"{value:.6g}")


def sweep_count(spec: SweepSpec) -> int:
    """How many runs the sweep makes, computed without expanding it."""
    count = 1
    for values in spec.grid.values():
        if isinstance(values, list):
            count *= len(values)
        else:
            count *= max(1, (values.linear if isinstance(values, LinearRange) else values.log)[2])
    if spec.random:
        count *= spec.random.samples
    return count * spec.seeds


def sweep_points(spec: SweepSpec) -> list[Point]:
    """Every run's values: grid x random samples x seeds, in a stable order."""
    import itertools

    paths = list(spec.grid)
    combos = [dict(zip(paths, c)) for c in itertools.product(*(grid_values(p, spec.grid[p]) for p in paths))]
    if spec.random:
        rng = _random.Random(spec.random.seed)
        samples = [{p: _draw(rng, p, d) for p, d in spec.random.params.items()} for _ in range(spec.random.samples)]
        combos = [{**c, **s} for c in combos for s in samples]
    return [Point(values=c, seed_offset=k) for c in combos for k in range(spec.seeds)]


def _draw(rng: _random.Random, path: str, dist: Distribution) -> Any:
    given = [k for k, v in dist.model_dump().items() if v is not None]
    if len(given) != 1:
        raise ConfigError(
            [{"field": f"random.params.{path}", "message": "give exactly one of uniform, loguniform, randint, choice"}]
        )
    if dist.uniform:
        return _tidy(rng.uniform(*dist.uniform))
    if dist.loguniform:
        lo, hi = dist.loguniform
        if lo <= 0 or hi <= 0:
            raise ConfigError([{"field": f"random.params.{path}", "message": "loguniform needs bounds > 0"}])
        return _tidy(10 ** rng.uniform(math.log10(lo), math.log10(hi)))
    if dist.randint:
        return rng.randint(*dist.randint)
    if not dist.choice:
        raise ConfigError([{"field": f"random.params.{path}", "message": "choice needs at least one value"}])
    return rng.choice(dist.choice)


# --- run names --------------------------------------------------------------------------------

# How a swept field shows in a run name; fields not listed show their last path part.
# Objective and model names are self-explanatory, so they show as the bare value.
NAME_PREFIX = {
    "algorithm.objective": "",
    "model.name": "",
    "task.name": "",
    "algorithm.lr": "lr",
    "algorithm.tau_m2": "tau",
    "rollout.group_size": "g",
    "rollout.temperature": "temp",
    "algorithm.updates_per_step": "u",
    "train.seed": "seed",
}


# Which swept values come first in a name (the rest keep the sweep's order).
NAME_ORDER = {"algorithm.objective": 0, "model.name": 1, "task.name": 2, "staleness.k": 3}


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        text = f"{value:g}"
        if "e" in text:  # 1e-06 -> 1e-6
            mantissa, exp = text.split("e")
            text = f"{mantissa}e{int(exp)}"
        return text
    if isinstance(value, list):
        return "+".join(format_value(v) for v in value)
    return str(value).rsplit("/", 1)[-1]  # model names: Qwen/Qwen3-1.7B-Base -> Qwen3-1.7B-Base


def run_name(values: dict[str, Any], config: dict[str, Any], seed: int | None, fallback: str) -> str:
    """e.g. m2po-s256-lr1e-6-seed2. Staleness shows as the paper's s = k x updates per step, from
    the run's own (validated) config; `seed` is None when every run has the same seed."""
    parts = []
    for path, value in sorted(values.items(), key=lambda item: NAME_ORDER.get(item[0], len(NAME_ORDER))):
        if path == "staleness.k":
            parts.append(f"s{vocabulary.staleness_in_updates(config, value)}")
            continue
        prefix = NAME_PREFIX.get(path, path.rsplit(".", 1)[-1].replace("_", ""))
        parts.append(f"{prefix}{format_value(value)}")
    if seed is not None:
        parts.append(f"seed{seed}")
    name = "-".join(parts) or fallback
    # Run names go into URLs and download headers: anything but a safe character becomes '_'.
    return _UNSAFE.sub("_", name)[:200]


_UNSAFE = re.compile(r"[^A-Za-z0-9_.+\-]")


# --- staleness in updates ---------------------------------------------------------------------

STALENESS_UPDATES = "staleness.s"


def staleness_in_updates(sweep: dict[str, Any] | None, config: dict[str, Any]) -> dict[str, Any] | None:
    """The sweep with `staleness.s` (staleness in optimizer updates) turned into `staleness.k`
    (batches): k = s / (updates_per_step x epochs) of the base config. Each s must be a whole
    multiple of that; errors name `sweep.staleness.s`."""
    if not sweep or STALENESS_UPDATES not in sweep:
        return sweep
    field = f"sweep.{STALENESS_UPDATES}"
    if "staleness.k" in sweep:
        raise ConfigError(
            [{"field": field, "message": "sweep staleness.s (updates) or staleness.k (batches), not both"}]
        )
    if {"algorithm.updates_per_step", "algorithm.epochs"} & set(sweep):
        raise ConfigError(
            [
                {
                    "field": field,
                    "message": "s in updates needs one updates_per_step x epochs: "
                    "with those swept, sweep staleness.k instead",
                }
            ]
        )
    if ((config or {}).get("staleness") or {}).get("mode", "stale_k") != "stale_k":
        raise ConfigError(
            [
                {
                    "field": field,
                    "message": "only stale_k mode has s = k x updates per step; "
                    "async runs sweep staleness.max_staleness (already in updates)",
                }
            ]
        )
    per_step = updates_per_step(config)
    values = grid_values(
        STALENESS_UPDATES, parse_sweep({STALENESS_UPDATES: sweep[STALENESS_UPDATES]}, None, 1).grid[STALENESS_UPDATES]
    )
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or v % per_step]
    if bad:
        raise ConfigError(
            [
                {
                    "field": field,
                    "message": f"{bad[0]!r} is not a whole multiple of {per_step} "
                    f"(updates_per_step x epochs): s = k x {per_step}",
                }
            ]
        )
    return {
        ("staleness.k" if path == STALENESS_UPDATES else path): (
            [int(v) // per_step for v in values] if path == STALENESS_UPDATES else spec
        )
        for path, spec in sweep.items()
    }
