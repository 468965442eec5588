"""A sweep of this product as a table of runs (studies/run_table.py): each succeeded run's numbers
measured from the metrics it streamed, so the page, `study_report` and `study_verdicts` judge the
same rows with the same code (studies/judge.py).

The staleness ramp: a stale run's first updates train on data younger than its staleness (the
delay queue is still filling). A run's staleness S is the largest `rollout/staleness_max` it logged
(else staleness.k x updates_per_step x epochs, or max_staleness in async mode), and the ramp ends at
its first update that reached S. "After the ramp" is every update from there on.
"""

from __future__ import annotations

import math

import numpy as np

from orchestrator.experiments.models import Run
from orchestrator.metrics.chunks import live_points
from orchestrator.studies.claims import Thresholds
from orchestrator.studies.run_table import RunRow
from orchestrator.studies.table import OBJECTIVE_PATH, Cell, staleness_path
from trainer.vocabulary import staleness_in_updates

M2_KEY = "actor/m2"
NEAR_DET_KEY = "actor/near_det_frac"
FRACTION_KEY = "actor/clip_frac"  # masked tokens for m2po, clipped tokens for the clip objectives
STALENESS_KEY = "rollout/staleness_max"
REWARD_KEYS = ("rollout/reward_mean", "train/reward_mean")
DEFAULT_TAU = 0.04


def configured_staleness(config: dict) -> int:
    """The staleness in optimizer updates that a run's config asks for."""
    st = config.get("staleness") or {}
    if st.get("mode", "stale_k") == "async":
        return int(st.get("max_staleness") or 0)
    return staleness_in_updates(config, int(st.get("k") or 0))


def _finite(pts) -> tuple[np.ndarray, np.ndarray]:
    keep = pts.specials == 0
    order = np.argsort(pts.steps[keep], kind="stable")
    return pts.steps[keep][order], pts.values[keep][order]


def _after(pts, start: float, reduce) -> float:
    if pts is None:
        return math.nan
    steps, values = _finite(pts)
    values = values[steps >= start]
    return float(reduce(values)) if values.size else math.nan


def swept_staleness(values: dict, config: dict) -> int | None:
    """The staleness in updates a cell's swept value stands for (staleness.k counts training steps)."""
    path = staleness_path(values)
    if path is None or not isinstance(values[path], (int, float)):
        return None
    if path == "staleness.k":
        return staleness_in_updates(config, int(values[path]))
    return int(values[path])


def run_rows(cells: list[Cell], th: Thresholds = Thresholds(), known: dict | None = None) -> list[RunRow]:
    """One row per run with data in `cells` (a table's cells, e.g. one arm's). `known`: the runs as
    the table judged them (pk -> run, with a role mapping's seed applied in memory)."""
    shapes = {rid: (cell, shape) for cell in cells for rid, shape in cell.shapes.items()}
    if not shapes:
        return []
    runs = {r.pk: r for r in Run.objects.filter(pk__in=list(shapes)).only("id", "config", "seed", "parent_id")}
    seeds = {pk: getattr(r, "seed", None) for pk, r in (known or {}).items()}  # a role's seed, set in memory
    keys = [M2_KEY, NEAR_DET_KEY, FRACTION_KEY, STALENESS_KEY, *REWARD_KEYS]
    points = live_points(list(shapes), keys)
    out = []
    for rid, (cell, shape) in shapes.items():
        run = runs[rid]
        config = run.config or {}
        alg = config.get("algorithm") or {}
        objective = str(cell.values.get(OBJECTIVE_PATH, alg.get("objective", "")))
        reward = next((points[(rid, k)] for k in REWARD_KEYS if (rid, k) in points), None)
        steps = _finite(reward)[0] if reward is not None else np.array([])
        first, last = (float(steps[0]), float(steps[-1])) if steps.size else (math.nan, math.nan)
        if steps.size > 1:  # the first logged update came one logging interval after the start
            first -= float(steps[1] - steps[0])
        swept = swept_staleness(cell.values, config)
        s = swept if swept is not None else configured_staleness(config)
        ramp_end = first + s
        if (rid, STALENESS_KEY) in points:
            st_steps, st_values = _finite(points[(rid, STALENESS_KEY)])
            if st_values.size:
                s = int(round(float(st_values.max())))
                ramp_end = float(st_steps[np.argmax(st_values >= s - 0.5)])
        tau = float(alg.get("tau_m2") or DEFAULT_TAU)
        fraction = _after(points.get((rid, FRACTION_KEY)), ramp_end, np.mean)
        whole = _after(points.get((rid, FRACTION_KEY)), -math.inf, np.mean)
        is_m2po = objective == "m2po"
        out.append(
            RunRow(
                objective=objective,
                staleness=s,
                seed=str(seeds.get(rid) if seeds.get(rid) is not None else run.seed),
                warmup=str(run.parent_id or ""),
                lr=float(alg.get("lr") or math.nan),
                updates_after_ramp=max(0.0, last - ramp_end) if math.isfinite(last) else math.nan,
                tail=cell.run_values.get(rid, math.nan),
                m2_median_over_tau=_after(points.get((rid, M2_KEY)), ramp_end, np.median) / tau,
                masked_fraction=fraction if is_m2po else math.nan,
                clipped_fraction=math.nan if is_m2po else fraction,
                near_deterministic_fraction=_after(points.get((rid, NEAR_DET_KEY)), ramp_end, np.mean),
                reward_movement=shape.movement,
                collapsed=shape.fell(th.collapse_margin * th.reward_range),
                masked_fraction_whole_run=whole if is_m2po else math.nan,
                clipped_fraction_whole_run=math.nan if is_m2po else whole,
                updates=last - first if math.isfinite(last) else math.nan,
            )
        )
    return out
