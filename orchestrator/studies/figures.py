"""PNG figures of a study, drawn from the stored series with Plotly and exported by Kaleido.

Each figure is what the compare page shows for /compare/?runs=...&group=<field>: one panel's keys,
the runs grouped by a config field, a mean line and a min-max band per group on a common grid,
with its legend and a title. Kaleido renders it with the machine's Chromium (it needs no browser
driver and downloads nothing); without Kaleido or Chromium the caller gets a clear error, not a
document without figures. A panel with no data is an error too, never a blank image.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from orchestrator.experiments.models import Run
from orchestrator.metrics.compare import comparable
from orchestrator.metrics.panels import panels_for
from orchestrator.metrics.selectors import keys_of, series

WIDTH, HEIGHT = 900, 420
TITLE_CHARS = 105  # a 14 px title line that fits the figure's width; a longer caption wraps
GRID = 300  # points of a group's mean line, as on the compare page
MAX_POINTS = 3000  # points read per run and key, as the compare page asks for
# static/js/metrics_core.js's COLORS, so a figure's groups have the page's colours
COLORS = ["#2f6fde", "#e4572e", "#29a35a", "#9b59b6", "#f2a541", "#17becf", "#8c564b", "#e377c2", "#7f7f7f"]
DASHES = ["solid", "dot", "dash", "longdash", "dashdot"]
THRESHOLD_COLOR = "#c8322b"


class FigureError(RuntimeError):
    pass


@dataclass(frozen=True)
class FigureSpec:
    filename: str
    caption: str
    run_ids: list[int]
    group: str  # config field the runs are grouped by (mean and min-max band per group); "" for one group
    panel: str  # panel id (orchestrator/metrics/panels.py)


@dataclass
class Band:
    x: np.ndarray
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


def aggregate(curves: list[tuple[np.ndarray, np.ndarray]], grid: int = GRID) -> Band | None:
    """Mean and min-max band across curves (x ascending) on a common grid; a curve counts
    where the grid point lies within its x range, as metrics_compare.js's aggregate()."""
    live = [(x, y) for x, y in curves if len(x)]
    if not live:
        return None
    lo, hi = min(x[0] for x, _ in live), max(x[-1] for x, _ in live)
    xs = np.linspace(lo, hi, grid) if hi > lo else np.array([lo], dtype=float)
    values = np.full((len(live), len(xs)), np.nan)
    for i, (x, y) in enumerate(live):
        inside = (xs >= x[0]) & (xs <= x[-1])
        values[i, inside] = np.interp(xs[inside], x, y)
    counted = ~np.isnan(values).all(axis=0)
    values = values[:, counted]
    return Band(xs[counted], np.nanmean(values, axis=0), np.nanmin(values, axis=0), np.nanmax(values, axis=0))


def _curve(points) -> tuple[np.ndarray, np.ndarray]:
    finite = [(s, v) for s, v, _ in points if v is not None and math.isfinite(v)]
    return np.array([s for s, _ in finite], dtype=float), np.array([v for _, v in finite], dtype=float)


def _groups(spec: FigureSpec, runs: list[Run]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for run in runs:
        value = comparable(run.config).get(spec.group) if spec.group else ""
        groups.setdefault(value if isinstance(value, str) else str(value), []).append(run.pk)
    return groups


def figure(spec: FigureSpec):
    """The Plotly figure of one spec: for each of the panel's keys, per group, a band and a mean line."""
    import plotly.graph_objects as go

    runs = list(Run.objects.filter(pk__in=spec.run_ids).order_by("pk"))
    panel = next(
        (p for p in panels_for(keys_of(spec.run_ids), [r.config for r in runs]) if p["id"] == spec.panel), None
    )
    if panel is None:
        raise FigureError(f"{spec.filename}: no '{spec.panel}' panel for these runs")
    traces = []
    groups = _groups(spec, runs)
    for ki, key in enumerate(panel["keys"]):
        per_run = series(spec.run_ids, key, max_points=MAX_POINTS)
        suffix = f" · {panel['labels'].get(key, key)}" if len(panel["keys"]) > 1 else ""
        for gi, (value, members) in enumerate(groups.items()):
            band = aggregate([_curve(per_run.get(rid, [])) for rid in members])
            if band is None:
                continue
            color = COLORS[gi % len(COLORS)]
            label = f"{spec.group}={value}{suffix}" if spec.group else f"{key}{suffix}"
            common = {"mode": "lines", "legendgroup": label, "hoverinfo": "skip"}
            traces.append(
                go.Scatter(x=band.x, y=band.lower, line={"width": 0, "color": color}, showlegend=False, **common)
            )
            traces.append(
                go.Scatter(
                    x=band.x,
                    y=band.upper,
                    line={"width": 0, "color": color},
                    fill="tonexty",
                    showlegend=False,
                    **common,
                )
            )
            traces[-1].fillcolor = _rgba(color, 0.18)
            dash = DASHES[ki % len(DASHES)]
            traces.append(
                go.Scatter(
                    x=band.x,
                    y=band.mean,
                    name=f"{label} (n={len(members)})",
                    line={"color": color, "width": 2, "dash": dash},
                    **common,
                )
            )
    if not traces:
        raise FigureError(f"{spec.filename}: the runs logged no '{spec.panel}' data")
    lo, hi = min(t.x[0] for t in traces), max(t.x[-1] for t in traces)
    for line in panel["lines"]:
        traces.append(
            go.Scatter(
                x=[lo, hi],
                y=[line["y"]] * 2,
                name=line["label"],
                mode="lines",
                line={"dash": "dash", "width": 1.2, "color": THRESHOLD_COLOR},
            )
        )
    title = textwrap.wrap(spec.caption, TITLE_CHARS) or [""]
    layout = {
        "title": {"text": "<br>".join(title), "font": {"size": 14}},
        "showlegend": True,
        "margin": {"t": 28 + 20 * len(title), "r": 16, "b": 110, "l": 60},
        "legend": {"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
        "xaxis": {"title": {"text": "optimizer updates"}},
        "yaxis": {"type": "log" if panel["log_y"] else "linear"},
        "template": "plotly_white",
    }
    return go.Figure(traces, layout)


def _rgba(hex_color: str, alpha: float) -> str:
    n = int(hex_color[1:], 16)
    return f"rgba({(n >> 16) & 255},{(n >> 8) & 255},{n & 255},{alpha})"


def draw(specs: list[FigureSpec], out_dir: Path) -> list[Path]:
    """Write one PNG per spec into out_dir."""
    try:
        import plotly.io as pio
    except ImportError:
        raise FigureError("plotly is not installed: pip install -r requirements-report.txt") from None
    figures = [(spec, figure(spec)) for spec in specs]  # every panel checked before a browser starts
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / spec.filename for spec in specs]
    for path in paths:  # a stale image of an earlier report must not pass for a new one
        path.unlink(missing_ok=True)
    try:  # one Chromium for all the figures
        pio.write_images([fig for _, fig in figures], paths, format="png", width=WIDTH, height=HEIGHT)
    except (ImportError, ValueError, RuntimeError) as exc:  # no kaleido, or no Chromium for it to start
        raise FigureError(f"Plotly's static export failed ({_first_line(exc)})") from None
    # Kaleido hands a figure's render error back instead of raising it, and plotly drops it (a busy
    # machine can time one figure out): each missing image is drawn again alone, which raises.
    for (_, fig), path in zip(figures, paths):
        if _written(path):
            continue
        try:
            pio.write_image(fig, path, format="png", width=WIDTH, height=HEIGHT)
        except Exception as exc:  # kaleido's, choreographer's and asyncio's errors alike
            raise FigureError(f"{path.name}: Plotly's static export failed ({_first_line(exc)})") from None
        if not _written(path):
            raise FigureError(f"{path.name}: Plotly's static export wrote no image")
    return paths


def _written(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
