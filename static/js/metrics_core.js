// Shared pieces of the metric charts (run page and compare page): decoding the API's points,
// smoothing, x-axis mappings, a Plotly panel with throttled redraws, zoom refetch and export,
// and the live event stream.
import { plotlyText } from "./plotly_text.js";

const MARK_SYMBOL = { "NaN": "x", "Infinity": "triangle-up", "-Infinity": "triangle-down" };
const DASH_ARRAYS = { solid: "", dot: "2 2", dash: "5 3", dashdot: "5 2 2 2", longdash: "8 3" }; // Plotly's dashes, in SVG
const COLORS = ["#2f6fde", "#e4572e", "#29a35a", "#9b59b6", "#f2a541", "#17becf", "#8c564b",
  "#e377c2", "#7f7f7f", "#bcbd22", "#1f3a93", "#c0392b"];

// [[step, value|"NaN"|"Infinity"|"-Infinity"], ...] -> {x, y (null for gaps), marks}
function decode(points) {
  const x = [], y = [], marks = [];
  for (const [step, value] of points) {
    x.push(step);
    if (typeof value === "string") { y.push(null); marks.push({ x: step, kind: value }); }
    else y.push(value);
  }
  return { x, y, marks };
}

// Append decoded points whose step is past the series' last step (replays may overlap).
function appendPoints(series, points) {
  const last = series.x.length ? series.x[series.x.length - 1] : -Infinity;
  const added = decode(points.filter((p) => p[0] > last));
  series.x.push(...added.x); series.y.push(...added.y); series.marks.push(...added.marks);
  return added;
}

// Debiased, time-weighted exponential moving average. The decay is per 1/1000 of the x range,
// not per point, so dense and sparse (or downsampled) curves smooth alike; dividing by the
// accumulated weight removes the bias towards the first value. Gaps (NaN/inf) stay gaps.
function smooth(x, y, weight) {
  if (!(weight > 0) || x.length < 2) return y.slice();
  const w = Math.min(weight, 0.999);
  const range = (x[x.length - 1] - x[0]) || 1;
  const out = new Array(y.length);
  let acc = 0, norm = 0, prev = null;
  for (let i = 0; i < y.length; i++) {
    const v = y[i];
    if (v === null || !Number.isFinite(v)) { out[i] = null; continue; }
    const decay = prev === null ? 0 : Math.pow(w, (1000 * (x[i] - prev)) / range);
    acc = acc * decay + v; norm = norm * decay + 1; prev = x[i];
    out[i] = acc / norm;
  }
  return out;
}

// The smoothing a panel is drawn with: the page's when its view sets one (the slider, a saved
// view, ?smooth=), else the panel's own default (M2: three noisy lines around its threshold).
// `viewSmooth` is null while the view sets none.
function smoothingOf(viewSmooth, panel) {
  if (viewSmooth !== null && viewSmooth !== undefined) return viewSmooth;
  return (panel && panel.smooth) || 0;
}

// The view's smoothing from a saved view: 0 is what a view saved without touching the slider
// stores, so it leaves the panels' defaults in place.
const savedSmoothing = (saved) => (saved && saved.smooth > 0 ? saved.smooth : null);

// What the smoothing slider shows: its value, or "panel default" while the view sets none.
const smoothingLabel = (viewSmooth) => (viewSmooth === null ? "panel default" : String(viewSmooth));

// Piecewise-linear monotone mapping step -> counter (tokens, samples, wall time).
class Mapper {
  constructor(steps, values) { this.steps = steps; this.values = values; }
  static identity() { return null; }
  static interp(xs, ys, v) {
    const n = xs.length;
    if (!n) return null;
    if (v <= xs[0]) return ys[0];
    if (v >= xs[n - 1]) return ys[n - 1];
    let lo = 0, hi = n - 1;
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (xs[mid] <= v) lo = mid; else hi = mid; }
    const t = (v - xs[lo]) / ((xs[hi] - xs[lo]) || 1);
    return ys[lo] + t * (ys[hi] - ys[lo]);
  }
  map(step) { return Mapper.interp(this.steps, this.values, step); }
  unmap(value) { return Mapper.interp(this.values, this.steps, value); }
  extend(points) {
    for (const [s, v] of points) {
      if (typeof v !== "number") continue;
      if (!this.steps.length || s > this.steps[this.steps.length - 1]) { this.steps.push(s); this.values.push(v); }
    }
  }
}

// Points per trace for a chart: about two per horizontal pixel, as W&B adapts to width.
function budgetFor(el, traces = 1) {
  const width = el.clientWidth || 600;
  return Math.max(100, Math.min(5000, Math.round((width * 2) / Math.max(1, Math.sqrt(traces)))));
}

function throttle(fn, ms) {
  let timer = null;
  return () => {
    if (timer) return;
    timer = setTimeout(() => { timer = null; fn(); }, ms);
  };
}

async function getJSON(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

function download(name, text, type) {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = Object.assign(document.createElement("a"), { href: url, download: name });
  document.body.appendChild(a); a.click(); a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

function csvCell(v) {
  if (v === null || v === undefined) return "";
  const s = String(v);
  return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

// Rows of {trace, run, key, step, x, value}; value keeps "NaN"/"Infinity" markers.
function toCSV(rows) {
  const cols = ["trace", "run", "key", "step", "x", "value"];
  return [cols.join(",")].concat(rows.map((r) => cols.map((c) => csvCell(r[c])).join(","))).join("\n") + "\n";
}

// Marker trace for NaN/inf points: drawn at the nearest finite value before them (or 0). `name`
// is already plotlyText, as every trace name the pages build.
function markTrace(series, xOf, name, color) {
  const xs = [], ys = [], symbols = [], text = [];
  let j = 0, lastFinite = 0;
  for (const m of series.marks) {
    while (j < series.x.length && series.x[j] <= m.x) {
      if (series.y[j] !== null) lastFinite = series.y[j];
      j++;
    }
    xs.push(xOf(m.x)); ys.push(lastFinite); symbols.push(MARK_SYMBOL[m.kind] || "x");
    text.push(`${m.kind} at step ${m.x}`);
  }
  return {
    x: xs, y: ys, text, mode: "markers", type: "scatter", name: `${name} (non-finite)`, showlegend: false,
    marker: { symbol: symbols, size: 9, color, line: { width: 1, color: "#c8322b" } },
    hovertemplate: "%{text}<extra></extra>", meta: { role: "marks" },
  };
}

// Wall-clock x-axis in the unit that suits the run's length (a 4-minute run in minutes).
function timeScale(spanSeconds) {
  if (spanSeconds < 180) return { div: 1, unit: "s" };
  if (spanSeconds < 3 * 3600) return { div: 60, unit: "min" };
  return { div: 3600, unit: "h" };
}

// Hover text: 4 significant digits and the optimizer update the point belongs to (the trace's name,
// already plotlyText, in the hover box's corner). `steps`:
// the points' updates when the x axis is something else (tokens, time); null when x is the update.
function hoverFor(trace, steps) {
  const update = steps ? "%{customdata}" : "%{x}";
  return { ...trace, ...(steps ? { customdata: steps } : {}),
    hovertemplate: `%{y:.4g} · update ${update}<extra>${trace.name || ""}</extra>` };
}

const EMPTY_HEIGHT = 140; // px of a panel with nothing to draw yet

// For HTML the page writes itself (panel headers, the key browser); Plotly's labels take plotlyText.
const HTML_ENTITIES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => HTML_ENTITIES[c]);

// One chart. The page supplies build() -> {traces, shapes}; the panel draws it, throttles
// redraws to ~10/s, reports zooms as step ranges and exports its data. The title, the one-line
// description and the export buttons sit in an HTML header above the plot, clear of Plotly's
// toolbar. A panel may default to a log y axis (M2) and carry threshold lines (tau).
class Panel {
  constructor(container, { id, title, description, build, onZoom, exportRows, xTitle, logDefault, lines, legend, lineStyles, empty }) {
    this.id = id; this.title = title; this.build = build; this.onZoom = onZoom; this.exportRows = exportRows;
    this.lineStyles = lineStyles || (() => []); // [{label, dash}] of the panel's keys, when it has several
    this.xTitle = xTitle || (() => "optimizer updates");
    this.logY = false;
    this.logDefault = Boolean(logDefault);
    this.lines = lines || [];
    this.legend = legend !== false; // false: the page draws one shared legend instead
    this.range = null; // zoomed x range, in axis units
    this.root = document.createElement("div");
    this.root.className = "metric-panel";
    this.root.dataset.panel = id;
    this.root.innerHTML = `<div class="panel-head">
        <div class="panel-titles"><h3 class="panel-title">${esc(title)}</h3>
        ${description ? `<p class="panel-desc" title="${esc(description)}">${esc(description)}</p>` : ""}
        <p class="panel-linekey" hidden></p></div>
        <div class="panel-tools">
        <button type="button" data-export="csv" title="download this chart's data as CSV">CSV</button>
        <button type="button" data-export="json" title="download this chart's data as JSON">JSON</button></div></div>
      <div class="panel-chart"></div>`;
    container.appendChild(this.root);
    this.el = this.root.querySelector(".panel-chart");
    this.el.dataset.panel = id;
    // A panel the page knows has no data yet is drawn small; it starts at that height, so that the
    // page does not jump (and a click below it land elsewhere) when it is drawn as it comes near.
    if (empty) this.el.style.height = `${EMPTY_HEIGHT}px`;
    this.redrawSoon = throttle(() => this.render(), 100);
    this.root.querySelector("[data-export=csv]").onclick = () =>
      download(`${id}.csv`, toCSV(this.exportRows()), "text/csv");
    this.root.querySelector("[data-export=json]").onclick = () =>
      download(`${id}.json`, JSON.stringify({ panel: id, title, rows: this.exportRows() }, null, 1), "application/json");
    this.drawn = false;
  }

  get isLog() { return this.logY || this.logDefault; }

  // ticklabeloverflow "allow": Plotly's default measures every tick label's box to hide those that
  // would spill past the chart, a third of a log axis's redraw; the margins here leave them room.
  layout(shapes, annotations, legendRows) {
    return {
      margin: { t: 8, r: 8, b: 34 + 18 * legendRows, l: 52 },
      height: 300 + 18 * legendRows,
      hovermode: "x unified",
      hoverlabel: { namelength: 40 },
      uirevision: this.id,
      showlegend: this.legend,
      legend: { orientation: "h", x: 0, y: -0.14, yanchor: "top", font: { size: 10 }, groupclick: "togglegroup" },
      xaxis: { title: { text: plotlyText(this.xTitle()), font: { size: 10 }, standoff: 2 }, automargin: true, ticklabeloverflow: "allow", ...(this.range ? { range: this.range, autorange: false } : { autorange: true }) },
      yaxis: { type: this.isLog ? "log" : "linear", autorange: true, exponentformat: "power", ticklabeloverflow: "allow" },
      shapes, annotations,
    };
  }

  // Threshold lines (tau) as dashed traces across the data's x extent: unlike shapes they sit
  // right on log axes and show in the legend and the hover.
  thresholdTraces(traces) {
    const xs = traces.filter((t) => t.meta && t.meta.role !== "threshold").flatMap((t) => t.x.filter((x) => x !== null && x !== undefined));
    if (!xs.length || !this.lines.length) return [];
    const lo = Math.min(...xs), hi = Math.max(...xs);
    return this.lines.map((line) => ({ x: [lo, hi], y: [line.y, line.y], name: plotlyText(line.label), type: "scatter", mode: "lines",
      line: { dash: "dash", width: 1.2, color: "#c8322b" }, hovertemplate: `${plotlyText(line.label)}<extra></extra>`,
      showlegend: this.legend, meta: { role: "threshold" } }));
  }

  render() {
    let { traces, shapes = [], annotations = [] } = this.build(this);
    if (this.isLog) {  // zeros and negatives have no place on a log axis: gaps, not errors
      traces = traces.map((t) => (t.meta && t.meta.role === "marks") ? t : { ...t, y: t.y.map((v) => (v !== null && v <= 0 ? null : v)) });
    }
    traces = traces.concat(this.thresholdTraces(traces));
    if (!this.legend) this.drawLineKey(traces);
    this.traceCount = traces.length;
    const named = this.legend ? traces.filter((t) => t.showlegend !== false).length : 0;
    const perRow = Math.max(1, Math.floor((this.el.clientWidth || 420) / 150));
    const legendRows = named > 1 ? Math.ceil(named / perRow) : (named ? 1 : 0);
    const layout = this.layout(shapes, annotations, legendRows);
    if (!traces.length) layout.height = EMPTY_HEIGHT; // an empty panel stays small until its first point
    this.el.style.height = `${layout.height}px`;
    if (!traces.length) {
      layout.annotations = [{ text: "no data yet", xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false,
        font: { color: "#687385" } }];
      layout.xaxis.visible = false; layout.yaxis.visible = false;
    }
    Plotly.react(this.el, traces, layout, { displaylogo: false, responsive: true, displayModeBar: "hover",
      modeBarButtonsToRemove: ["select2d", "lasso2d", "toImage"] });
    if (!this.drawn) {
      this.drawn = true;
      this.el.on("plotly_relayout", (ev) => this.relayout(ev));
    }
    this.el.dataset.points = String(traces.reduce((n, t) => n + ((t.meta && t.meta.role === "line") ? t.x.length : 0), 0));
  }

  // Without a legend of its own (the compare page's shared legend names runs and groups), the
  // panel says in its header what its line styles mean: one dash per key, the dashed thresholds.
  drawLineKey(traces) {
    const entries = this.lineStyles().map((s) => ({ label: s.label, dash: s.dash, color: "#3c4257" }));
    if (traces.some((t) => t.meta && t.meta.role === "threshold")) {
      this.lines.forEach((line) => entries.push({ label: line.label, dash: "dash", color: "#c8322b" }));
    }
    const key = this.root.querySelector(".panel-linekey");
    key.hidden = !entries.length;
    key.innerHTML = entries.map((e) => `<span class="linekey-item" data-dash="${esc(e.dash)}">` +
      `<svg width="22" height="6" aria-hidden="true"><line x1="0" y1="3" x2="22" y2="3" stroke="${e.color}" ` +
      `stroke-width="1.6" stroke-dasharray="${DASH_ARRAYS[e.dash] || ""}"/></svg>${esc(e.label)}</span>`).join("");
  }

  // extendTraces for pure appends (no smoothing, step axis); anything else redraws in full.
  extend(byTrace) {
    if (!this.drawn) return this.redrawSoon();
    this.pendingExtend = this.pendingExtend || new Map();
    for (const [index, pts] of byTrace) {
      const cur = this.pendingExtend.get(index) || { x: [], y: [] };
      cur.x.push(...pts.x); cur.y.push(...pts.y);
      this.pendingExtend.set(index, cur);
    }
    if (!this.flushSoon) this.flushSoon = throttle(() => this.flushExtend(), 100);
    this.flushSoon();
  }

  flushExtend() {
    const pending = this.pendingExtend; this.pendingExtend = null;
    if (!pending || !pending.size) return;
    const indices = [...pending.keys()];
    Plotly.extendTraces(this.el, { x: indices.map((i) => pending.get(i).x), y: indices.map((i) => pending.get(i).y) }, indices);
    this.el.dataset.points = String(this.el.data.reduce((n, t) => n + ((t.meta && t.meta.role === "line") ? t.x.length : 0), 0));
  }

  relayout(ev) {
    if (ev["xaxis.autorange"] || ev["xaxis.range"] === undefined && ev["xaxis.range[0]"] === undefined) {
      if (ev["xaxis.autorange"] && this.range) { this.range = null; this.onZoom && this.onZoom(this, null); }
      return;
    }
    const r = ev["xaxis.range"] || [ev["xaxis.range[0]"], ev["xaxis.range[1]"]];
    this.range = [Number(r[0]), Number(r[1])];
    this.onZoom && this.onZoom(this, this.range);
  }
}

// The live stream of one run: EventSource with resume (the browser resends Last-Event-ID).
class LiveStream {
  constructor(url, { after, keys, onPoints, onReset, onStatus }) {
    const q = new URLSearchParams({ after: String(after) });
    for (const k of keys) q.append("key", k); // one key= per key: keys may hold commas
    this.source = new EventSource(`${url}?${q}`);
    this.source.addEventListener("points", (e) => onPoints(JSON.parse(e.data)));
    this.source.addEventListener("reset", (e) => onReset(JSON.parse(e.data)));
    this.source.onopen = () => onStatus && onStatus(true);
    this.source.onerror = () => onStatus && onStatus(false);
  }
  close() { this.source.close(); }
}

function color(i) { return COLORS[i % COLORS.length]; }

// The compare page loads Plotly with `defer`, after its chart module: the module asks for its data
// while the browser still evaluates Plotly, and what draws waits for this. Deferred scripts have
// all run by DOMContentLoaded (readyState is already "interactive" while they run, so ask the
// navigation entry whether it has fired); a page that loads Plotly before the module finds it there.
const plotlyReady = new Promise((resolve) => {
  const nav = performance.getEntriesByType("navigation")[0];
  if (window.Plotly || (nav && nav.domContentLoadedEventEnd > 0)) resolve();
  else document.addEventListener("DOMContentLoaded", () => resolve(), { once: true });
});

export { decode, appendPoints, smooth, smoothingOf, savedSmoothing, smoothingLabel, Mapper, budgetFor, throttle, getJSON, download, toCSV,
  markTrace, Panel, LiveStream, color, timeScale, hoverFor, esc, plotlyText, plotlyReady };
