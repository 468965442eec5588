// The run page's panels: the curated off-policy layout (or a saved view's), and any logged key
// added from the key browser. A panel fetches its downsampled history when it is about to be
// seen, then live points from the run's event stream extend it (extendTraces, redraws throttled
// to ~10/s). Zooming refetches the visible step range at full resolution; the toolbar switches
// the page's x-axis, smoothing and log y, and each panel may set its own log y and x-axis.
import * as M from "./metrics_core.js";
import * as W from "./metrics_workspace.js";

function start() {
  const configEl = document.getElementById("run-metrics-config");
  if (!configEl) return;
  const cfg = JSON.parse(configEl.textContent);
  const root = document.getElementById("run-metrics");
  const EVAL_SET = /^eval\/[^/]+\/acc$/;
  const EVAL_AVG = "eval/avg_acc";
  const TERMINAL = ["succeeded", "failed", "cancelled", "lost"];

  const saved = cfg.views && cfg.views.current ? cfg.views.current.state : null;
  // smooth: null while neither the slider nor a saved view sets it (each panel draws its own default)
  const view = { x: (saved && saved.x) || "step", smooth: M.savedSmoothing(saved), logY: false };
  const series = {}; // key -> {x: steps, y, marks}, for the keys whose history is loaded
  const pendingLive = {}; // key -> live points that came before the key's history
  const loading = new Map(); // key -> promise of its history
  const mappers = {}; // x-axis id -> Mapper(step -> counter)
  let attempts = [];
  let stream = null;
  const panels = W.applyLayout(cfg.panels, saved);
  const known = new Set(cfg.keys); // keys the run has: the series API answers 404 for any other
  const xOfPanel = (panel) => panel.x || view.x;

  const axis = (id) => cfg.x_axes.find((a) => a.id === id);
  // Wall time is shown in s, min or h by the run's length so far.
  function timeDiv() {
    const m = mappers.time;
    return m && m.values.length ? M.timeScale(m.values[m.values.length - 1] - m.values[0]) : { div: 3600, unit: "h" };
  }
  function xOf(step, xid) {
    const m = mappers[xid];
    if (xid === "step" || !m) return step;
    const v = m.map(step);
    return xid === "time" ? (v - m.values[0]) / timeDiv().div : v;
  }
  function stepOf(x, xid) {
    const m = mappers[xid];
    if (xid === "step" || !m) return x;
    return m.unmap(xid === "time" ? x * timeDiv().div + m.values[0] : x);
  }
  const xLabel = (xid) => (xid === "time" ? `wall time (${timeDiv().unit})` : axis(xid).label);

  function seriesUrl(key, params = {}) {
    return `${cfg.series_url}?${new URLSearchParams({ key, ...params })}`;
  }

  function build(panel) {
    const traces = [];
    const xid = xOfPanel(panel);
    const xOf1 = (step) => xOf(step, xid);
    const smoothing = M.smoothingOf(view.smooth, panel);
    panel.keys.forEach((key, i) => {
      const s = (panel.zoomed && panel.zoomed[key]) || series[key];
      if (!s || !s.x.length) return;
      const color = M.color(i);
      const xs = s.x.map(xOf1);
      const name = M.plotlyText((panel.labels && panel.labels[key]) || key);
      if (smoothing > 0) {
        traces.push({ x: xs, y: s.y, name: M.plotlyText(`${key} (raw)`), type: "scatter", mode: "lines", opacity: 0.25,
          line: { color, width: 1 }, showlegend: false, hoverinfo: "skip", meta: { role: "raw", key } });
      }
      // a line needs two points: a series of one (a count logged once) is drawn as its marker
      traces.push(M.hoverFor({ x: xs, y: M.smooth(xs, s.y, smoothing), name, type: "scatter", mode: xs.length === 1 ? "lines+markers" : "lines",
        line: { color, width: 1.6 }, connectgaps: false, meta: { role: "line", key } }, xid === "step" ? null : s.x));
      if (s.marks.length) traces.push(M.markTrace(s, xOf1, name, color));
    });
    const restarts = attempts.filter((a) => a[0] > 1);
    return {
      traces,
      shapes: restarts.map((a) => ({ type: "line", xref: "x", yref: "paper", x0: xOf1(a[1]), x1: xOf1(a[1]), y0: 0, y1: 1,
        line: { dash: "dot", width: 1, color: "#7a5a00" } })),
      annotations: restarts.map((a) => ({ x: xOf1(a[1]), y: 1, xref: "x", yref: "paper", text: `attempt ${a[0]}`,
        showarrow: false, font: { size: 10, color: "#7a5a00" }, yanchor: "bottom" })),
    };
  }

  function exportRows(panel) {
    const rows = [];
    for (const key of panel.keys) {
      const s = (panel.zoomed && panel.zoomed[key]) || series[key];
      if (!s) continue;
      const marks = new Map(s.marks.map((m) => [m.x, m.kind]));
      s.x.forEach((step, i) => rows.push({ trace: key, run: cfg.run, key, step, x: xOf(step, xOfPanel(panel)),
        value: s.y[i] === null ? (marks.get(step) || "NaN") : s.y[i] }));
    }
    return rows;
  }

  async function zoom(panel, range) {
    if (!range) { panel.zoomed = null; panel.obj.render(); return; }
    const xid = xOfPanel(panel);
    const start = Math.max(0, Math.floor(stepOf(range[0], xid))), end = Math.ceil(stepOf(range[1], xid));
    const budget = M.budgetFor(panel.obj.el, panel.keys.length);
    const answers = await Promise.all(panel.keys.filter((k) => series[k] && known.has(k)).map((key) =>
      M.getJSON(seriesUrl(key, { start, end, max_points: budget })).then((a) => [key, M.decode(a.points)])));
    panel.zoomed = Object.fromEntries(answers);
    panel.obj.render();
  }

  const container = root.querySelector("[data-panels]");
  const lazy = W.lazy();
  let browser = null;
  const charted = () => new Set(panels.flatMap((p) => p.keys));

  function addPanelObj(panel, before = null) {
    panel.obj = new M.Panel(container, {
      id: panel.id, title: panel.title, description: panel.description, build: () => build(panel),
      onZoom: (_obj, range) => zoom(panel, range), exportRows: () => exportRows(panel), xTitle: () => xLabel(xOfPanel(panel)),
      logDefault: panel.log_y, lines: panel.lines, empty: !panel.keys.some((k) => known.has(k)),
    });
    if (before) container.insertBefore(panel.obj.root, before);
    panel.obj.logY = view.logY;
    panel.controls = W.panelControls(panel, { xAxes: cfg.x_axes, knownKeys: () => known,
      onChange: async (p, what) => {
        if (what === "keys") browser.refresh();
        await show(p);
      },
      onRemove: (p) => {
        lazy.forget(p.obj.root);
        Plotly.purge(p.obj.el); p.obj.root.remove();
        panels.splice(panels.indexOf(p), 1);
        browser.refresh();
      } });
  }

  let group = null;
  for (const panel of panels) {
    if (panel.group && panel.group !== group) {  // a heading across the grid, e.g. "System"
      const heading = container.appendChild(document.createElement("h3"));
      heading.className = "panel-group";
      heading.textContent = panel.group;
    }
    group = panel.group || null;
    addPanelObj(panel);
  }

  // The histories of `keys` not yet loaded, in calls of at most 50 keys (the API's limit); returns
  // the stream position the answers reflect (null when nothing was asked).
  async function loadKeys(keys) {
    const todo = [...new Set(keys)].filter((k) => known.has(k) && !series[k] && !loading.has(k));
    const waits = [...new Set(keys)].filter((k) => loading.has(k)).map((k) => loading.get(k));
    let seq = null;
    for (let i = 0; i < todo.length; i += 50) {
      const chunk = todo.slice(i, i + 50);
      const budget = M.budgetFor(panels.length ? panels[0].obj.el : container, 2);
      const request = M.getJSON(seriesUrl(chunk.join(","), { max_points: budget })).then((answer) => {
        answer.series.forEach((a) => {
          series[a.key] = M.decode(a.points);
          if (pendingLive[a.key]) { M.appendPoints(series[a.key], pendingLive[a.key]); delete pendingLive[a.key]; }
        });
        attempts = answer.attempts;
        return answer.seq;
      }).finally(() => chunk.forEach((k) => loading.delete(k)));
      chunk.forEach((k) => loading.set(k, request));
      seq = await request;
    }
    await Promise.all(waits);
    return seq;
  }

  // Draw a panel with its data (fetched if need be) and its x-axis' mapping.
  async function show(panel) {
    panel.requested = true;
    const xid = xOfPanel(panel);
    if (xid !== "step" && !mappers[xid]) await loadMapper(xid);
    await loadKeys(panel.keys);
    if (panels.includes(panel)) panel.obj.render();
  }

  function addPanel(key) {
    const panel = W.customPanel(key, panels);
    panels.push(panel);
    addPanelObj(panel);
    browser.refresh();
    show(panel);
    panel.obj.root.scrollIntoView({ block: "nearest" });
    return panel;
  }

  // The curated panels and those near the viewport load at once, in one call per 50 keys (their
  // stream position opens the stream); panels the user added, when scrolled near. Returns that position.
  async function loadAll() {
    (await M.getJSON(cfg.keys_url)).keys.forEach((k) => known.add(k));
    W.keyList([...known]);
    browser.refresh([...known]);
    for (const k of Object.keys(series)) delete series[k];
    const first = panels.filter((p) => !p.custom || W.nearViewport(p.obj.root));
    const seq = await loadKeys(first.flatMap((p) => p.keys));
    for (const id of Object.keys(mappers)) { delete mappers[id]; await loadMapper(id); }
    for (const p of panels) { p.zoomed = null; p.obj.range = null; p.requested = false; }
    await Promise.all(first.map(show));
    panels.filter((p) => !first.includes(p)).forEach((p) => lazy.watch(p.obj.root, () => show(p)));
    if (seq !== null || !known.size) return seq || 0;
    // nothing near the viewport was logged: the stream starts from now, not from the first point
    return (await M.getJSON(seriesUrl([...known][0], { max_points: 2 }))).seq;
  }

  async function loadMapper(id) {
    const ax = axis(id);
    if (!ax || !ax.key || !known.has(ax.key)) return;
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
    const now = panels.filter((p) => !p.custom || W.nearViewport(p.obj.root));
    now.forEach((p) => { show(p).then(() => Plotly.Plots.resize(p.obj.el)); });
    panels.filter((p) => !now.includes(p)).forEach((p) => lazy.watch(p.obj.root, () => show(p)));
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
      const wasKnown = known.has(key);
      if (!wasKnown) { known.add(key); browser.refresh([...known]); W.keyList([...known]); }
      for (const ax of cfg.x_axes) {
        if (!mappers[ax.id] || ax.key !== key) continue;
        // live points carry no wall time: their arrival time stands in until the next reload
        mappers[ax.id].extend(ax.field === "time" ? points.map((p) => [p[0], Date.now() / 1000]) : points);
      }
      if (EVAL_SET.test(key)) {
        const evalPanel = panels.find((p) => p.id === "eval");
        if (evalPanel && !evalPanel.keys.includes(key)) setEvalKeys(evalPanel, [...evalPanel.keys, key]);
      }
      // A key logged before the page's stream opened has a history that live points only extend:
      // until the history is loaded they wait, or a panel of it would hold what arrived since the
      // page loaded and never fetch the rest (a saved view's added panels load when scrolled near).
      if (!series[key] && (wasKnown || !charted().has(key))) {
        const pend = pendingLive[key] || (pendingLive[key] = []);
        pend.push(...points);
        if (pend.length > 20000) pend.splice(0, pend.length - 20000); // older points are in the history by then
        if (wasKnown && !loading.has(key)) {
          const waiting = panels.filter((p) => p.requested && p.keys.includes(key));
          if (waiting.length) loadKeys([key]).then(() => waiting.forEach((p) => p.obj.redrawSoon()));
        }
        continue;
      }
      const s = series[key] || (series[key] = { x: [], y: [], marks: [] });
      const isNew = s.x.length === 0;
      const added = M.appendPoints(s, points);
      if (!added.x.length) continue;
      for (const panel of panels) {
        if (!panel.keys.includes(key)) continue;
        const canExtend = !isNew && M.smoothingOf(view.smooth, panel) === 0 && xOfPanel(panel) === "step" && !added.marks.length && !panel.zoomed && panel.obj.drawn;
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
      loadKeys([EVAL_AVG]).then(() => panel.obj.redrawSoon());
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

  const xSelect = root.querySelector("[data-control=x]");
  const smoothInput = root.querySelector("[data-control=smooth]");
  xSelect.value = view.x;
  smoothInput.value = String(view.smooth ?? 0);
  root.querySelector("[data-show=smooth]").textContent = M.smoothingLabel(view.smooth);
  xSelect.onchange = async (e) => {
    view.x = e.target.value;
    if (view.x !== "step" && !mappers[view.x]) await loadMapper(view.x);
    panels.forEach((p) => { if (!p.x) { p.obj.range = null; p.zoomed = null; p.obj.render(); } });
  };
  smoothInput.oninput = (e) => {
    view.smooth = Number(e.target.value);
    root.querySelector("[data-show=smooth]").textContent = e.target.value;
    panels.forEach((p) => p.obj.render());
  };
  root.querySelector("[data-control=logy]").onchange = (e) => {
    view.logY = e.target.checked;
    panels.forEach((p) => { p.obj.logY = view.logY; p.obj.render(); p.controls.syncLog(); });
  };

  browser = W.keyBrowser(root.querySelector("[data-key-browser]"), { keys: [...known], charted, onAdd: addPanel });
  W.keyList([...known]);
  W.viewsBar(root.querySelector("[data-views]"), cfg.views, () => ({
    panels: panels.map(W.panelSpec), smooth: view.smooth ?? 0, x: view.x, group: "", runs: [cfg.run], experiments: [],
  }));

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
}

start();
