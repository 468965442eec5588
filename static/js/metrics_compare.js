// The compare page: the run panels overlaid for many runs, optionally grouped by a config field
// (mean line and a min–max / ±std / ±stderr band across the group's runs), a summary table, a
// sweep heatmap and a URL that restores the whole view. Any key the runs logged can be added as a
// panel (the key browser); a panel fetches its keys when it is about to be seen; a saved view
// (?view=<id>) sets the panels, grouping, smoothing and filters, explicit URL parameters win.
import * as M from "./metrics_core.js";
import * as W from "./metrics_workspace.js";
import { plotlyText } from "./plotly_text.js";

function start() {
  const configEl = document.getElementById("compare-config");
  if (!configEl) return;
  const cfg = JSON.parse(configEl.textContent);
  const root = document.getElementById("compare");
  root.dataset.startMs = String(Math.round(performance.now())); // benchmarks/workspace.py: this script's share
  const runs = cfg.runs;
  const runById = new Map(runs.map((r) => [r.id, r]));
  const GRID = 300; // points of a group's mean line
  const DASHES = ["solid", "dot", "dash", "dashdot"];

  // Embedded in an experiment's page, the view starts from the config (grouped by the swept
  // field) and leaves that page's URL alone; "Copy link" gives the full compare page's.
  const saved = cfg.views && cfg.views.current ? cfg.views.current.state : null;
  const embeddedGroup = cfg.default_group && !saved ? { group: cfg.default_group } : {}; // a saved view groups as saved
  const params = cfg.embedded ? new URLSearchParams(embeddedGroup) : new URLSearchParams(location.search);
  const filters = (saved && saved.filters) || {};
  const view = {
    group: params.get("group") ?? (saved ? saved.group : ""),
    band: params.get("band") || filters.band || "minmax",
    individual: params.has("individual") ? params.get("individual") === "1" : Boolean(filters.individual),
    x: params.get("x") || (saved && saved.x) || "step",
    // null while neither the URL nor a saved view sets it: each panel draws its own default
    smooth: params.has("smooth") ? Number(params.get("smooth")) || 0 : M.savedSmoothing(saved),
    logY: params.get("logy") === "1",
    summary: params.get("summary") || "",
    hx: params.get("hx") || "", hy: params.get("hy") || "", hm: params.get("hm") || "", hs: params.get("hs") || "",
    lineage: params.get("lineage") === "1", upto: params.get("upto") === "1",
  };
  const data = {}; // key -> Map(runId -> decoded series)
  const mappers = {}; // axis id -> Map(runId -> Mapper)
  const panels = W.applyLayout(cfg.panels, saved);
  const known = new Set(cfg.keys || []); // keys the runs have: the compare API answers 404 for any other
  const hidden = new Set(filters.hidden || []); // legend entries switched off ("run<id>" or "group<value>")
  const loading = new Map(); // key -> promise of its histories
  const xOfPanel = (panel) => panel.x || view.x;
  const FRACTION_KEY = "actor/clip_frac";
  const axis = (id) => cfg.x_axes.find((a) => a.id === id) || cfg.x_axes[0];

  // --- URL state ---------------------------------------------------------------------------
  function saveView() {
    const q = new URLSearchParams();
    for (const k of ["runs", "experiment", "view"]) if (params.get(k)) q.set(k, params.get(k));
    if (view.group) q.set("group", view.group);
    if (view.band !== "minmax") q.set("band", view.band);
    if (view.individual) q.set("individual", "1");
    if (view.x !== "step") q.set("x", view.x);
    if (view.smooth !== null) q.set("smooth", String(view.smooth));
    if (view.logY) q.set("logy", "1");
    for (const k of ["summary", "hx", "hy", "hm", "hs"]) if (view[k]) q.set(k, view[k]);
    for (const k of ["lineage", "upto"]) if (view[k]) q.set(k, "1");
    if (cfg.embedded) {
      const link = new URL(cfg.compare_url, location.href);
      for (const [k, v] of q) if (k !== "runs" && k !== "experiment" && k !== "view") link.searchParams.set(k, v);
      return link.href;
    }
    history.replaceState(null, "", `${location.pathname}?${q}`);
    return location.href;
  }

  // --- forks drawn from their parent's step (?lineage=1, ?upto=1) -----------------------------
  // A fork's updates count from 0; shifted by the parent's update it started from, its curve
  // continues the parent's. With upto, a compared parent's curve stops at the latest such update.
  const forks = cfg.forks || {}, forkClip = cfg.fork_clip || {};
  const forkOffset = (runId) => (view.lineage && forks[runId] !== undefined ? forks[runId] : 0);
  function uptoFork(runId, s) {
    const end = view.lineage && view.upto ? forkClip[runId] : undefined;
    if (end === undefined) return s;
    const keep = s.x.map((step) => step <= end);
    return { ...s, x: s.x.filter((_, i) => keep[i]), y: s.y.filter((_, i) => keep[i]), marks: s.marks.filter((m) => m.x <= end) };
  }

  // --- x-axis ------------------------------------------------------------------------------
  // Wall time in s, min or h by the longest run's span.
  function timeDiv() {
    const spans = [...((mappers.time && mappers.time.values()) || [])].map((m) => (m.values.length ? m.values[m.values.length - 1] - m.values[0] : 0));
    return M.timeScale(spans.length ? Math.max(...spans) : 1e9);
  }
  function xOf(runId, step, xid) {
    const m = mappers[xid] && mappers[xid].get(runId);
    if (xid === "step" || !m) return step + forkOffset(runId);
    const v = m.map(step);
    return xid === "time" ? (v - m.values[0]) / timeDiv().div : v;
  }
  function stepOf(runId, x, xid) {
    const m = mappers[xid] && mappers[xid].get(runId);
    if (xid === "step" || !m) return x - forkOffset(runId);
    return m.unmap(xid === "time" ? x * timeDiv().div + m.values[0] : x);
  }
  const xLabel = (xid) => (xid === "time" ? `wall time (${timeDiv().unit})` : axis(xid).label);

  // Keys of every run: key -> Map(runId -> decoded series). One call carries up to 50 keys and
  // 200 runs x keys (the compare API's caps), so a page's first panels come in one.
  async function fetchKeys(keys, extra = {}, budgetEl = null) {
    const budget = M.budgetFor(budgetEl || (panels[0] ? panels[0].obj.el : root), runs.length);
    const perCall = Math.max(1, Math.min(50, Math.floor(200 / Math.max(1, runs.length))));
    const calls = [];
    for (let i = 0; i < keys.length; i += perCall) {
      // one key= per key: a key is any printable text, commas included
      const q = new URLSearchParams({ runs: runs.map((r) => r.id).join(","), max_points: budget, ...extra });
      for (const k of keys.slice(i, i + perCall)) q.append("key", k);
      calls.push(M.getJSON(`${cfg.series_url}?${q}`));
    }
    const out = new Map();
    for (const answer of await Promise.all(calls)) {
      for (const s of answer.series) out.set(s.key, new Map(s.runs.map((r) => [r.run, M.decode(r.points)])));
    }
    return out;
  }
  const fetchKey = async (key, extra = {}, budgetEl = null) => (await fetchKeys([key], extra, budgetEl)).get(key);

  async function loadMapper(id) {
    const ax = axis(id);
    if (!ax.key || mappers[id] || !known.has(ax.key)) return;
    const per = await fetchKey(ax.key, { max_points: 3000, ...(ax.field ? { field: ax.field } : {}) });
    mappers[id] = new Map([...per].map(([rid, d]) => [rid, new M.Mapper(d.x, d.y.map((v) => (v === null ? 0 : v)))]));
  }

  // --- grouping ----------------------------------------------------------------------------
  function groupsOf() {
    const groups = new Map();
    for (const r of runs) {
      const v = view.group ? r.config[view.group] ?? null : "";
      const value = typeof v === "string" ? v : JSON.stringify(v);
      if (!groups.has(value)) groups.set(value, []);
      groups.get(value).push(r);
    }
    return groups;
  }

  // One run's curve as plotted: mapped x, smoothed y, finite points only (for interpolation).
  function curve(runId, s, xid, smoothing) {
    s = uptoFork(runId, s);
    const xs = s.x.map((step) => xOf(runId, step, xid));
    const ys = M.smooth(xs, s.y, smoothing);
    const fx = [], fy = [];
    xs.forEach((x, i) => { if (ys[i] !== null && Number.isFinite(ys[i])) { fx.push(x); fy.push(ys[i]); } });
    return { xs, ys, fx, fy };
  }

  // Mean and band across curves on a common grid; a run counts where it has data.
  function aggregate(curves) {
    const live = curves.filter((c) => c.fx.length);
    if (!live.length) return null;
    const lo = Math.min(...live.map((c) => c.fx[0])), hi = Math.max(...live.map((c) => c.fx[c.fx.length - 1]));
    const out = { x: [], mean: [], lower: [], upper: [], n: [] };
    for (let i = 0; i < GRID; i++) {
      const x = GRID === 1 || hi === lo ? lo : lo + ((hi - lo) * i) / (GRID - 1);
      const vals = live.filter((c) => x >= c.fx[0] && x <= c.fx[c.fx.length - 1]).map((c) => M.Mapper.interp(c.fx, c.fy, x));
      if (!vals.length) continue;
      const mean = vals.reduce((a, b) => a + b, 0) / vals.length;
      const std = vals.length > 1 ? Math.sqrt(vals.reduce((a, v) => a + (v - mean) ** 2, 0) / (vals.length - 1)) : 0;
      const spread = view.band === "std" ? std : std / Math.sqrt(vals.length);
      out.x.push(x); out.mean.push(mean); out.n.push(vals.length);
      if (view.band === "minmax") { out.lower.push(Math.min(...vals)); out.upper.push(Math.max(...vals)); }
      else { out.lower.push(mean - spread); out.upper.push(mean + spread); }
    }
    return out;
  }

  function rgba(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${alpha})`;
  }

  function build(panel) {
    const traces = [];
    const groups = groupsOf();
    const xid = xOfPanel(panel);
    const smoothing = M.smoothingOf(view.smooth, panel);
    panel.keys.forEach((key, ki) => {
      const per = (panel.zoomed && panel.zoomed[key]) || data[key];
      if (!per) return;
      const dash = DASHES[ki % DASHES.length];
      const suffix = panel.keys.length > 1 ? ` · ${key}` : "";
      const runSuffix = (r) => (key === FRACTION_KEY ? ` · ${r.fraction_label}` : suffix);
      if (!view.group) {
        runs.forEach((r, ri) => {
          const s = per.get(r.id);
          if (!s || !s.x.length || hidden.has(`run${r.id}`)) return;
          const c = curve(r.id, s, xid, smoothing);
          if (smoothing > 0) {  // the raw line, faint, under the smoothed one
            traces.push({ x: c.xs, y: uptoFork(r.id, s).y, name: plotlyText(`${r.name} (raw)`), type: "scatter", mode: "lines", opacity: 0.25,
              showlegend: false, hoverinfo: "skip", legendgroup: `run${r.id}`, line: { color: M.color(ri), width: 1, dash },
              meta: { role: "raw", key, run: r.id } });
          }
          traces.push(M.hoverFor({ x: c.xs, y: c.ys, name: plotlyText(`${r.name}${runSuffix(r)}`), type: "scatter", mode: "lines", connectgaps: false,
            legendgroup: `run${r.id}`, line: { color: M.color(ri), width: 1.5, dash }, meta: { role: "line", key, run: r.id } },
          xid === "step" ? null : s.x));
          if (s.marks.length) traces.push(M.markTrace(s, (step) => xOf(r.id, step, xid), plotlyText(r.name), M.color(ri)));
        });
        return;
      }
      [...groups].forEach(([value, members], gi) => {
        if (hidden.has(`group${value}`)) return;
        const color = M.color(gi);
        const label = plotlyText(`${view.group}=${value}${suffix}`);
        const curves = members.filter((r) => per.get(r.id) && per.get(r.id).x.length).map((r) => curve(r.id, per.get(r.id), xid, smoothing));
        const agg = aggregate(curves);
        if (!agg) return;
        traces.push({ x: agg.x, y: agg.lower, type: "scatter", mode: "lines", line: { width: 0, color }, showlegend: false,
          hoverinfo: "skip", legendgroup: label, meta: { role: "band-lower", group: value, key } });
        traces.push({ x: agg.x, y: agg.upper, type: "scatter", mode: "lines", line: { width: 0, color }, fill: "tonexty",
          fillcolor: rgba(color, 0.18), showlegend: false, hoverinfo: "skip", legendgroup: label,
          meta: { role: "band", group: value, key } });
        traces.push({ x: agg.x, y: agg.mean, name: `${label} (n=${members.length})`, type: "scatter", mode: "lines",
          legendgroup: label, line: { color, width: 2, dash }, customdata: agg.n,
          hovertemplate: `%{y:.4g} (mean of %{customdata})<extra>${label}</extra>`, meta: { role: "mean", group: value, key } });
        if (view.individual) {
          members.forEach((r) => {
            const s = per.get(r.id);
            if (!s || !s.x.length) return;
            const c = curve(r.id, s, xid, smoothing);
            traces.push({ x: c.xs, y: c.ys, name: plotlyText(r.name), type: "scatter", mode: "lines", opacity: 0.4, showlegend: false,
              legendgroup: label, line: { color, width: 1, dash }, meta: { role: "line", key, run: r.id } });
          });
        }
      });
    });
    return { traces };
  }

  function exportRows(panel) {
    const rows = [];
    for (const key of panel.keys) {
      const per = (panel.zoomed && panel.zoomed[key]) || data[key];
      if (!per) continue;
      for (const [rid, s] of per) {
        const marks = new Map(s.marks.map((m) => [m.x, m.kind]));
        const name = runById.get(rid).name;
        s.x.forEach((step, i) => rows.push({ trace: name, run: rid, key, step, x: xOf(rid, step, xOfPanel(panel)),
          value: s.y[i] === null ? (marks.get(step) || "NaN") : s.y[i] }));
      }
    }
    return rows;
  }

  async function zoom(panel, range) {
    if (!range) { panel.zoomed = null; panel.obj.render(); return; }
    const xid = xOfPanel(panel);
    const start = Math.max(0, Math.floor(Math.min(...runs.map((r) => stepOf(r.id, range[0], xid)))));
    const end = Math.ceil(Math.max(...runs.map((r) => stepOf(r.id, range[1], xid))));
    panel.zoomed = Object.fromEntries(await fetchKeys(panel.keys.filter((k) => known.has(k)), { start, end }, panel.obj.el));
    panel.obj.render();
  }

  // --- summary table and heatmap -------------------------------------------------------------
  const fmt = (v) => (v === null || v === undefined ? "–" : typeof v === "number" ? Number(v.toPrecision(4)) : v);
  const mean = (vs) => { const f = vs.filter((v) => typeof v === "number" && Number.isFinite(v)); return f.length ? f.reduce((a, b) => a + b, 0) / f.length : null; };
  const stat = (rid, key, name) => ((cfg.summary[rid] || {})[key] || {})[name];

  function renderSummary() {
    const key = view.summary || cfg.study_metric || (panels[0] && panels[0].keys[0]);
    const body = document.querySelector("#summary-table tbody");
    if (!body || !key) return;
    const rows = view.group
      ? [...groupsOf()].map(([value, members]) => [`${view.group}=${value} (n=${members.length})`,
        ...["tail_mean", "best", "last", "min", "max", "last_step"].map((s) => mean(members.map((r) => stat(r.id, key, s))))])
      : runs.map((r) => [r.name, ...["tail_mean", "best", "last", "min", "max", "last_step"].map((s) => stat(r.id, key, s))]);
    body.innerHTML = "";
    for (const row of rows) {
      const tr = document.createElement("tr");
      row.forEach((v, i) => { const td = document.createElement("td"); td.textContent = i ? fmt(v) : v; if (i) td.className = "num"; tr.appendChild(td); });
      body.appendChild(tr);
    }
  }

  function renderHeatmap() {
    const el = document.getElementById("heatmap");
    if (!el) return;
    const hx = view.hx || cfg.fields[0], hy = view.hy || cfg.fields[1];
    const key = view.hm || cfg.study_metric || (panels[0] && panels[0].keys[0]), which = view.hs || "tail_mean";
    const label = (v) => plotlyText(typeof v === "string" ? v : JSON.stringify(v ?? null));
    const xs = [...new Set(runs.map((r) => label(r.config[hx])))].sort();
    const ys = [...new Set(runs.map((r) => label(r.config[hy])))].sort();
    const cells = new Map();
    for (const r of runs) {
      const k = `${label(r.config[hx])}|${label(r.config[hy])}`;
      if (!cells.has(k)) cells.set(k, []);
      cells.get(k).push(stat(r.id, key, which));
    }
    const z = ys.map((y) => xs.map((x) => mean(cells.get(`${x}|${y}`) || [])));
    const n = ys.map((y) => xs.map((x) => (cells.get(`${x}|${y}`) || []).length));
    Plotly.react(el, [{ type: "heatmap", x: xs, y: ys, z, customdata: n, colorscale: "Viridis",
      texttemplate: "%{z:.3g}", hovertemplate: `${plotlyText(hx)}=%{x}<br>${plotlyText(hy)}=%{y}<br>${plotlyText(which)} ${plotlyText(key)}: %{z:.4g} (mean of %{customdata})<extra></extra>` }],
    { margin: { t: 10, r: 10, b: 50, l: 90 }, xaxis: { title: { text: plotlyText(hx) }, type: "category" }, yaxis: { title: { text: plotlyText(hy) }, type: "category" } },
    { displaylogo: false, responsive: true });
  }

  // --- wiring ------------------------------------------------------------------------------
  const container = root.querySelector("[data-panels]");
  const lazy = W.lazy();
  let browser = null;
  let ready = false; // the first panels drawn: later panels draw as they come near
  const charted = () => new Set(panels.flatMap((p) => p.keys));

  // The histories of `keys`: those neither loaded nor on their way are asked for in one call.
  function loadKeys(keys) {
    keys = [...new Set(keys)].filter((k) => known.has(k) && !data[k]);
    const missing = keys.filter((k) => !loading.has(k));
    if (missing.length) {
      const answer = fetchKeys(missing);
      for (const key of missing) {
        loading.set(key, answer.then((m) => { data[key] = m.get(key); }).finally(() => loading.delete(key)));
      }
    }
    return Promise.all(keys.map((k) => loading.get(k)));
  }

  async function show(panel) {
    const xid = xOfPanel(panel);
    if (xid !== "step") await loadMapper(xid);
    await loadKeys(panel.keys);
    await M.plotlyReady;
    if (panels.includes(panel)) { panel.shown = true; panel.obj.render(); }
  }

  function addPanelObj(panel) {
    panel.obj = new M.Panel(container, { id: panel.id, title: panel.title, description: panel.description,
      build: () => build(panel), onZoom: (_obj, range) => zoom(panel, range), exportRows: () => exportRows(panel),
      xTitle: () => xLabel(xOfPanel(panel)), logDefault: panel.log_y, lines: panel.lines, legend: false,
      empty: !panel.keys.some((k) => known.has(k)),
      lineStyles: () => (panel.keys.length > 1 ? panel.keys.map((key, ki) => ({ label: key, dash: DASHES[ki % DASHES.length] })) : []) });
    panel.obj.logY = view.logY;
    panel.controls = W.panelControls(panel, { xAxes: cfg.x_axes, knownKeys: () => known,
      onChange: async (p, what) => { if (what === "keys") browser.refresh(); await show(p); },
      onRemove: (p) => {
        lazy.forget(p.obj.root);
        Plotly.purge(p.obj.el); p.obj.root.remove();
        panels.splice(panels.indexOf(p), 1);
        browser.refresh();
      } });
    if (ready) lazy.watch(panel.obj.root, () => show(panel));
  }
  panels.forEach(addPanelObj);

  // The asked-for panel is fetched and drawn first, then scrolled to: scrolling first would bring
  // the panels above it near the viewport, and their fetches and draws would go ahead of it.
  function addPanel(key) {
    const panel = W.customPanel(key, panels);
    panels.push(panel);
    addPanelObj(panel);
    lazy.forget(panel.obj.root); // asked for now: fetched at once, not when the observer next looks
    browser.refresh();
    show(panel).finally(() => panel.obj.root.scrollIntoView({ block: "nearest" }));
    return panel;
  }

  // Panels not yet scrolled near keep their empty placeholder until they are.
  const renderAll = () => { renderLegend(); panels.forEach((p) => { if (p.shown) p.obj.render(); }); renderSummary(); saveView(); };

  // One legend for every panel, above them: a button per run (or group) that hides or shows it
  // everywhere. Plotly's own legends, one per panel, turned into scroll boxes at 8+ runs.
  function renderLegend() {
    const box = root.querySelector("[data-legend]");
    if (!box) return;
    const entries = view.group
      ? [...groupsOf()].map(([value, members], i) => ({ id: `group${value}`, label: `${view.group}=${value} (n=${members.length})`, color: M.color(i) }))
      : runs.map((r, i) => ({ id: `run${r.id}`, label: r.name, color: M.color(i), title: `#${r.id} ${r.state} · ${r.fraction_label}` }));
    box.innerHTML = "";
    for (const e of entries) {
      const b = document.createElement("button");
      b.type = "button"; b.className = "legend-item"; b.dataset.entry = e.id;
      b.setAttribute("aria-pressed", hidden.has(e.id) ? "false" : "true");
      if (e.title) b.title = e.title;
      b.innerHTML = `<span class="swatch" style="background:${e.color}"></span>`;
      b.appendChild(document.createTextNode(e.label));
      b.onclick = () => { if (hidden.has(e.id)) hidden.delete(e.id); else hidden.add(e.id); renderAll(); };
      box.appendChild(b);
    }
  }

  function bind(name, prop, parse = (e) => e.target.value, after = renderAll) {
    const el = document.querySelector(`[data-control=${name}]`);
    if (!el) return;
    if (el.type === "checkbox") el.checked = Boolean(view[prop]); else if (view[prop] !== "" && view[prop] !== undefined && view[prop] !== null) el.value = String(view[prop]);
    if (el.type !== "checkbox" && !view[prop] && el.value && ["summary", "hx", "hy", "hm", "hs"].includes(prop)) view[prop] = el.value;
    el.addEventListener(el.type === "range" ? "input" : "change", async (e) => { view[prop] = parse(e); await after(); });
  }
  bind("group", "group");
  bind("band", "band");
  bind("individual", "individual", (e) => e.target.checked);
  bind("smooth", "smooth", (e) => {
    document.querySelector("[data-show=smooth]").textContent = e.target.value;
    return Number(e.target.value);
  });
  document.querySelector("[data-show=smooth]").textContent = M.smoothingLabel(view.smooth);
  bind("logy", "logY", (e) => e.target.checked, () => { panels.forEach((p) => { p.obj.logY = view.logY; p.controls.syncLog(); }); renderAll(); });
  bind("x", "x", (e) => e.target.value, async () => {
    await loadMapper(view.x);
    panels.forEach((p) => { if (!p.x) { p.obj.range = null; p.zoomed = null; } });
    renderAll();
  });
  bind("lineage", "lineage", (e) => e.target.checked);
  bind("upto", "upto", (e) => e.target.checked);
  bind("summary-metric", "summary", (e) => e.target.value, () => { renderSummary(); saveView(); });
  for (const h of ["hx", "hy", "hm", "hs"]) bind(h, h, (e) => e.target.value, () => { renderHeatmap(); saveView(); });
  document.querySelector("[data-action=share]").onclick = async () => {
    const href = saveView();
    const box = document.querySelector("[data-show=share]");
    box.hidden = false; box.value = href; box.select();
    try { await navigator.clipboard.writeText(href); } catch (err) { /* the box shows the link */ }
  };

  // --- live: the runs' own event streams (as on the run page) extend the compared traces ------
  const streams = new Map(); // run id -> LiveStream
  function onRunPoints(runId, event) {
    const dirty = new Set();
    for (const [key, points] of Object.entries(event.points)) {
      if (!known.has(key)) { known.add(key); browser.refresh([...known]); W.keyList([...known]); continue; }
      const per = data[key];
      if (!per) continue; // not drawn yet: its history, fetched when drawn, will hold these points
      const s = per.get(runId) || { x: [], y: [], marks: [] };
      per.set(runId, s);
      if (!M.appendPoints(s, points).x.length) continue;
      panels.forEach((p) => { if (p.keys.includes(key) && !p.zoomed) dirty.add(p); });
    }
    dirty.forEach((p) => p.obj.redrawSoon());
    root.dataset.lastEvent = String(event.seq);
  }
  function setLive() {
    const el = root.querySelector("[data-show=live]");
    if (!el) return;
    const open = [...streams.values()].filter((s) => s.open).length;
    el.textContent = open ? `● live (${open} run${open > 1 ? "s" : ""})` : "○ reconnecting";
    el.classList.toggle("on", open > 0);
  }
  async function reloadRun(runId) {  // a restart replaced the run's points: fetch its history again
    for (const [key, fresh] of await fetchKeys(Object.keys(data))) {
      if (fresh.has(runId)) data[key].set(runId, fresh.get(runId));
    }
    renderAll();
  }
  function openStreams() {
    for (const live of cfg.live || []) {
      const stream = new M.LiveStream(live.stream_url, {
        after: live.after, keys: [],
        onPoints: (event) => onRunPoints(live.run, event),
        onReset: () => reloadRun(live.run),
        onStatus: (on) => { stream.open = on; setLive(); },
      });
      streams.set(live.run, stream);
    }
  }

  // The first panels' histories are asked for before the key browser and the views bar are built
  // (the async function runs up to its first await at once), and the saved views list waits for
  // the first draw: on a page of 200 keys both would otherwise go ahead of the panels in view.
  renderLegend(); // from the config alone: drawn before the panels, it does not push them down after
  const firstDraw = (async () => {
    if (view.x !== "step") await loadMapper(view.x);
    const first = panels.filter((p) => W.nearViewport(p.obj.root, 0)); // in view now; the rest as they come near
    loadKeys(first.flatMap((p) => p.keys)).catch(() => {}); // in one call; each show() finds its keys on their way
    await Promise.all(first.map(show));
    ready = true;
    panels.filter((p) => !first.includes(p)).forEach((p) => lazy.watch(p.obj.root, () => show(p)));
    renderSummary(); saveView(); // renderAll less the panels and the legend: drawn already
    const heatmap = document.getElementById("heatmap"); // below the panels: drawn when it comes near
    if (heatmap) lazy.watch(heatmap, renderHeatmap);
    openStreams();
    root.dataset.readyMs = String(Math.round(performance.now())); // benchmarks/workspace.py reads it
    root.dataset.ready = "1";
  })();
  firstDraw.catch((err) => console.warn("compare load failed", err));

  const experimentId = cfg.embedded ? new URL(cfg.compare_url, location.href).searchParams.get("experiment") : params.get("experiment");
  browser = W.keyBrowser(root.querySelector("[data-key-browser]"), { keys: [...known], charted, onAdd: addPanel });
  firstDraw.finally(() => W.keyList([...known])); // the "+ key" boxes' suggestions: not needed to draw
  W.viewsBar(root.querySelector("[data-views]"), cfg.views, () => ({
    panels: panels.map(W.panelSpec), group: view.group, smooth: view.smooth ?? 0, x: view.x,
    filters: { band: view.band, individual: view.individual, hidden: [...hidden] },
    runs: experimentId ? [] : runs.map((r) => r.id),
    experiments: experimentId ? [Number(experimentId)] : [],
  }), { after: firstDraw });
}

start();
