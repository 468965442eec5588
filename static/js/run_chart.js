// The run page's default off-policy panels: downsampled history once, then live points from the
// run's event stream appended with extendTraces (redraws throttled to ~10/s). Zooming refetches
// the visible step range at full resolution; the toolbar switches the x-axis, smoothing and log y.
(function () {
  "use strict";
  const M = window.OPLMetrics;
  const configEl = document.getElementById("run-metrics-config");
  if (!M || !configEl) return;
  const cfg = JSON.parse(configEl.textContent);
  const root = document.getElementById("run-metrics");
  const EVAL_SET = /^eval\/[^/]+\/acc$/;
  const EVAL_AVG = "eval/avg_acc";
  const TERMINAL = ["succeeded", "failed", "cancelled", "lost"];

  const view = { x: "step", smooth: 0, logY: false };
  const series = {}; // key -> {x: steps, y, marks}
  const mappers = {}; // x-axis id -> Mapper(step -> counter)
  let attempts = [];
  let stream = null;
  const panels = cfg.panels.map((p) => ({ ...p, keys: [...p.keys] }));
  const known = new Set(cfg.keys); // keys the run has: the series API answers 404 for any other

  const axis = (id) => cfg.x_axes.find((a) => a.id === id);
  // Wall time is shown in s, min or h by the run's length so far.
  function timeDiv() {
    const m = mappers.time;
    return m && m.values.length ? M.timeScale(m.values[m.values.length - 1] - m.values[0]) : { div: 3600, unit: "h" };
  }
  function xOf(step) {
    const m = mappers[view.x];
    if (view.x === "step" || !m) return step;
    const v = m.map(step);
    return view.x === "time" ? (v - m.values[0]) / timeDiv().div : v;
  }
  function stepOf(x) {
    const m = mappers[view.x];
    if (view.x === "step" || !m) return x;
    return m.unmap(view.x === "time" ? x * timeDiv().div + m.values[0] : x);
  }
  const xLabel = () => (view.x === "time" ? `wall time (${timeDiv().unit})` : axis(view.x).label);

  function seriesUrl(key, params = {}) {
    return `${cfg.series_url}?${new URLSearchParams({ key, ...params })}`;
  }

  function build(panel) {
    const traces = [];
    panel.keys.forEach((key, i) => {
      const s = (panel.zoomed && panel.zoomed[key]) || series[key];
      if (!s || !s.x.length) return;
      const color = M.color(i);
      const xs = s.x.map(xOf);
      const name = (panel.labels && panel.labels[key]) || key;
      if (view.smooth > 0) {
        traces.push({ x: xs, y: s.y, name: `${key} (raw)`, type: "scatter", mode: "lines", opacity: 0.25,
          line: { color, width: 1 }, showlegend: false, hoverinfo: "skip", meta: { role: "raw", key } });
      }
      traces.push(M.hoverFor({ x: xs, y: M.smooth(xs, s.y, view.smooth), name, type: "scatter", mode: "lines",
        line: { color, width: 1.6 }, connectgaps: false, meta: { role: "line", key } }, view.x === "step" ? null : s.x));
      if (s.marks.length) traces.push(M.markTrace(s, xOf, name, color));
    });
    const restarts = attempts.filter((a) => a[0] > 1);
    return {
      traces,
      shapes: restarts.map((a) => ({ type: "line", xref: "x", yref: "paper", x0: xOf(a[1]), x1: xOf(a[1]), y0: 0, y1: 1,
        line: { dash: "dot", width: 1, color: "#7a5a00" } })),
      annotations: restarts.map((a) => ({ x: xOf(a[1]), y: 1, xref: "x", yref: "paper", text: `attempt ${a[0]}`,
        showarrow: false, font: { size: 10, color: "#7a5a00" }, yanchor: "bottom" })),
    };
  }

  function exportRows(panel) {
    const rows = [];
    for (const key of panel.keys) {
      const s = (panel.zoomed && panel.zoomed[key]) || series[key];
      if (!s) continue;
      const marks = new Map(s.marks.map((m) => [m.x, m.kind]));
      s.x.forEach((step, i) => rows.push({ trace: key, run: cfg.run, key, step, x: xOf(step),
        value: s.y[i] === null ? (marks.get(step) || "NaN") : s.y[i] }));
    }
    return rows;
  }

  async function zoom(panel, range) {
    if (!range) { panel.zoomed = null; panel.obj.render(); return; }
    const start = Math.max(0, Math.floor(stepOf(range[0]))), end = Math.ceil(stepOf(range[1]));
    const budget = M.budgetFor(panel.obj.el, panel.keys.length);
    const answers = await Promise.all(panel.keys.filter((k) => series[k] && known.has(k)).map((key) =>
      M.getJSON(seriesUrl(key, { start, end, max_points: budget })).then((a) => [key, M.decode(a.points)])));
    panel.zoomed = Object.fromEntries(answers);
    panel.obj.render();
  }

  const container = root.querySelector("[data-panels]");
  let group = null;
  for (const panel of panels) {
    if (panel.group && panel.group !== group) {  // a heading across the grid, e.g. "System"
      const heading = container.appendChild(document.createElement("h3"));
      heading.className = "panel-group";
      heading.textContent = panel.group;
    }
    group = panel.group || null;
    panel.obj = new M.Panel(container, {
      id: panel.id, title: panel.title, description: panel.description, build: () => build(panel),
      onZoom: (_obj, range) => zoom(panel, range), exportRows: () => exportRows(panel), xTitle: xLabel,
      logDefault: panel.log_y, lines: panel.lines,
    });
  }

  // Load every charted key; returns the stream position the answers reflect.
  async function loadAll() {
    (await M.getJSON(cfg.keys_url)).keys.forEach((k) => known.add(k));
    const keys = [...new Set(panels.flatMap((p) => p.keys))].filter((k) => known.has(k));
    const budget = M.budgetFor(panels[0].obj.el, 2);
    let seq = 0;
    if (keys.length) {  // every charted key in one call
      const answer = await M.getJSON(seriesUrl(keys.join(","), { max_points: budget }));
      answer.series.forEach((a) => { if (a.points.length) series[a.key] = M.decode(a.points); else delete series[a.key]; });
      seq = answer.seq;
      attempts = answer.attempts;
    }
    for (const id of Object.keys(mappers)) await loadMapper(id);
    panels.forEach((p) => { p.zoomed = null; p.obj.range = null; p.obj.render(); });
    return seq;
  }

  async function loadMapper(id) {
    const ax = axis(id);
    if (!ax.key || !known.has(ax.key)) return;
    const a = await M.getJSON(seriesUrl(ax.key, { max_points: 5000, ...(ax.field ? { field: ax.field } : {}) }));
    const d = M.decode(a.points);
    mappers[id] = new M.Mapper(d.x, d.y.map((v) => (v === null ? 0 : v)));
  }

  // A queued run's page shows its place in the queue until the run starts or reports.
  function showCharts() {
    const note = root.querySelector("[data-queued]");
    if (!note) return;
    note.remove();
    container.hidden = false;
    panels.forEach((p) => { p.obj.render(); Plotly.Plots.resize(p.obj.el); });
  }

  let queueRefreshed = Date.now();
  async function refreshQueue() {  // the place in line, from the page itself, every 15 s at most
    const el = root.querySelector("[data-show=queue]");
    if (!el || Date.now() - queueRefreshed < 15000) return;
    queueRefreshed = Date.now();
    const html = await (await fetch(location.href, { credentials: "same-origin" })).text();
    const fresh = new DOMParser().parseFromString(html, "text/html").querySelector("#run-metrics [data-show=queue]");
    if (fresh) el.textContent = fresh.textContent;
  }

  function onPoints(event) {
    showCharts();
    const touched = new Map(); // panel -> [[traceIndex, {x, y}]] | null (needs a full redraw)
    for (const [key, points] of Object.entries(event.points)) {
      known.add(key);
      for (const ax of cfg.x_axes) {
        if (!mappers[ax.id] || ax.key !== key) continue;
        // live points carry no wall time: their arrival time stands in until the next reload
        mappers[ax.id].extend(ax.field === "time" ? points.map((p) => [p[0], Date.now() / 1000]) : points);
      }
      if (EVAL_SET.test(key)) {
        const evalPanel = panels.find((p) => p.id === "eval");
        if (evalPanel && !evalPanel.keys.includes(key)) setEvalKeys(evalPanel, [...evalPanel.keys, key]);
      }
      const s = series[key] || (series[key] = { x: [], y: [], marks: [] });
      const isNew = s.x.length === 0;
      const added = M.appendPoints(s, points);
      if (!added.x.length) continue;
      for (const panel of panels) {
        if (!panel.keys.includes(key)) continue;
        const canExtend = !isNew && view.smooth === 0 && view.x === "step" && !added.marks.length && !panel.zoomed && panel.obj.drawn;
        const index = canExtend ? panel.obj.el.data.findIndex((t) => t.meta && t.meta.role === "line" && t.meta.key === key) : -1;
        if (index < 0) { touched.set(panel, null); continue; }
        if (touched.get(panel) === null) continue;
        const list = touched.get(panel) || [];
        list.push([index, { x: added.x, y: added.y }]);
        touched.set(panel, list);
      }
    }
    for (const [panel, list] of touched) {
      if (list === null) panel.obj.redrawSoon(); else panel.obj.extend(list);
    }
    root.dataset.lastEvent = String(event.seq);
  }

  // Each benchmark once; the average only when it averages two or more (as panels.eval_keys).
  function setEvalKeys(panel, keys) {
    const sets = [...new Set(keys.filter((k) => EVAL_SET.test(k) && k !== EVAL_AVG))].sort();
    panel.keys = sets.length === 1 ? sets : [EVAL_AVG, ...sets];
    if (panel.keys.includes(EVAL_AVG) && !series[EVAL_AVG] && known.has(EVAL_AVG)) {  // history of the average, now shown
      M.getJSON(seriesUrl(EVAL_AVG, { max_points: M.budgetFor(panel.obj.el, panel.keys.length) })).then((a) => {
        if (a.points.length) { series[EVAL_AVG] = M.decode(a.points); panel.obj.redrawSoon(); }
      });
    }
  }

  function setLive(on) {
    const el = root.querySelector("[data-show=live]");
    el.textContent = on ? "● live" : (stream ? "○ reconnecting" : "○ finished");
    el.classList.toggle("on", on);
  }

  function openStream(after) {
    if (stream) stream.close();
    stream = new M.LiveStream(cfg.stream_url, {
      after, keys: [], onPoints,
      onReset: async () => { stream.close(); stream = null; openStream(await loadAll()); },
      onStatus: setLive,
    });
  }

  root.querySelector("[data-control=x]").onchange = async (e) => {
    view.x = e.target.value;
    if (view.x !== "step" && !mappers[view.x]) await loadMapper(view.x);
    panels.forEach((p) => { p.obj.range = null; p.zoomed = null; p.obj.render(); });
  };
  root.querySelector("[data-control=smooth]").oninput = (e) => {
    view.smooth = Number(e.target.value);
    root.querySelector("[data-show=smooth]").textContent = e.target.value;
    panels.forEach((p) => p.obj.render());
  };
  root.querySelector("[data-control=logy]").onchange = (e) => {
    view.logY = e.target.checked;
    panels.forEach((p) => { p.obj.logY = view.logY; p.obj.render(); });
  };

  // "update 1200 / 1200 · step 600 / 600", as experiments/progress.py writes it.
  function progressText(updates, total) {
    const per = cfg.progress.updates_per_step;
    total = total ?? cfg.progress.total_updates;
    const steps = Math.floor(updates / per);
    return total == null ? `update ${updates} · step ${steps}` : `update ${updates} / ${total} · step ${steps} / ${Math.floor(total / per)}`;
  }

  // The progress stays current while the run is active (state, reason and actions come with the
  // job card's poll: templates/cluster/_run_job.html).
  async function pollRun() {
    try {
      const run = await M.getJSON(cfg.run_url);
      const progress = document.getElementById("run-progress");
      if (progress) progress.textContent = progressText(run.step, run.total_steps);
      if (run.state !== "queued") showCharts(); else await refreshQueue();
      if (TERMINAL.includes(run.state)) {
        setTimeout(() => { if (stream) { stream.close(); stream = null; setLive(false); } }, 10000);
        return;
      }
    } catch (err) { console.warn("run refresh failed", err); }
    setTimeout(pollRun, document.hidden ? 15000 : 5000);
  }

  loadAll().then((seq) => {
    if (!cfg.terminal) { openStream(seq); pollRun(); } else setLive(false);
  }).catch((err) => console.warn("metrics load failed", err));
})();
