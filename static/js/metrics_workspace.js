// The chart workspace shared by the run, compare and experiment pages: every logged key in a
// browser grouped by prefix (with a search box), panels the user adds from any keys (several
// keys may share one), per-panel log-y and x-axis, panels that load only once scrolled near, and
// saved views (named layouts of a project, shared by URL) through /api/v1/.../views.
// The pages keep their own data and drawing; this module holds what the two have in common.
import * as M from "./metrics_core.js";

const esc = M.esc;

const prefixOf = (key) => (key.includes("/") ? key.slice(0, key.indexOf("/") + 1) : "(no prefix)");
const panelIdFor = (key) => `k-${key.replace(/[^A-Za-z0-9_.:-]/g, "_")}`.slice(0, 80);

// The curated panels with a saved view applied: the view's panels in its order, each with its
// log-y and x. A curated panel keeps its resolved keys, description and threshold lines, plus any
// key the user added to it; curated panels the view left out stay out.
function applyLayout(curated, state) {
  const copy = (p) => ({ ...p, keys: [...p.keys], x: p.x || null });
  if (!state || !state.panels || !state.panels.length) return curated.map(copy);
  const byId = new Map(curated.map((p) => [p.id, p]));
  return state.panels.map((s) => {
    const base = byId.get(s.id);
    if (!base) {
      return { id: s.id, title: s.title || s.keys.join(" · "), keys: [...s.keys], description: "", log_y: s.log_y,
        x: s.x || null, lines: [], labels: {}, custom: true };
    }
    return { ...copy(base), keys: [...base.keys, ...s.keys.filter((k) => !base.keys.includes(k))], log_y: s.log_y, x: s.x || null };
  });
}

// A new panel for one key, with an id no other panel has.
function customPanel(key, panels) {
  let id = panelIdFor(key), n = 2;
  while (panels.some((p) => p.id === id)) id = `${panelIdFor(key)}-${n++}`;
  return { id, title: key, keys: [key], description: "", log_y: false, x: null, lines: [], labels: {}, custom: true };
}

// What a saved view stores of a panel.
const panelSpec = (p) => ({ id: p.id, title: p.title.slice(0, 200), keys: p.keys.slice(0, 20), log_y: Boolean(p.obj && p.obj.isLog), x: p.x || null });

// --- the key browser ------------------------------------------------------------------------
// Every key the run(s) logged, grouped by prefix; a click adds the key as a panel. Keys already
// in a panel are marked. `refresh(keys)` redraws it when new keys arrive.
function keyBrowser(box, { keys, charted, onAdd }) {
  if (!box) return { refresh() {} };
  box.innerHTML = `<summary>All keys <span data-show="key-count"></span></summary>
    <div class="key-browser-body"><input type="search" data-control="key-search" placeholder="search keys, e.g. pg_loss" aria-label="search keys">
    <div class="key-groups" data-key-groups></div></div>`;
  const groupsEl = box.querySelector("[data-key-groups]");
  const search = box.querySelector("[data-control=key-search]");
  let current = [];
  function filter() {
    const q = search.value.trim().toLowerCase();
    for (const group of groupsEl.children) {
      let shown = 0;
      for (const li of group.querySelectorAll("li")) {
        const hit = !q || li.dataset.key.toLowerCase().includes(q);
        li.hidden = !hit; shown += hit;
      }
      group.hidden = shown === 0;
    }
  }
  function refresh(keys) {
    current = [...new Set(keys)].sort();
    const inPanels = charted();
    const groups = new Map();
    for (const k of current) {
      const g = prefixOf(k);
      if (!groups.has(g)) groups.set(g, []);
      groups.get(g).push(k);
    }
    groupsEl.innerHTML = [...groups].map(([g, ks]) => `<div class="key-group" data-group="${esc(g)}"><h4>${esc(g)} <small>${ks.length}</small></h4><ul>${
      ks.map((k) => `<li data-key="${esc(k)}"><button type="button" data-add-key="${esc(k)}" class="${inPanels.has(k) ? "charted" : ""}"
        title="${inPanels.has(k) ? "in a panel; click to add another panel of it" : "add as a panel"}">${esc(k.slice(g.endsWith("/") ? g.length : 0))}</button></li>`).join("")
    }</ul></div>`).join("");
    box.querySelector("[data-show=key-count]").textContent = `(${current.length}, ${[...inPanels].filter((k) => current.includes(k)).length} charted)`;
    filter();
  }
  search.addEventListener("input", filter);
  groupsEl.addEventListener("click", (e) => {
    const b = e.target.closest("[data-add-key]");
    if (b) onAdd(b.dataset.addKey);
  });
  refresh(keys);
  return { refresh: (ks) => refresh(ks || current) };
}

// One <datalist> of every key, for the panels' "+ key" boxes.
function keyList(keys) {
  let list = document.getElementById("metric-key-list");
  if (!list) { list = document.body.appendChild(document.createElement("datalist")); list.id = "metric-key-list"; }
  list.innerHTML = [...new Set(keys)].sort().map((k) => `<option value="${esc(k)}">`).join("");
}

// A panel's own controls, in a row under its title: log y, its x-axis, "+ key" and remove.
function panelControls(panel, { xAxes, knownKeys, onChange, onRemove }) {
  const row = document.createElement("div");
  row.className = "panel-options";
  row.innerHTML = `<label class="check" title="log y for this panel"><input type="checkbox" data-panel-control="logy"> log y</label>
    <label>x <select data-panel-control="x" aria-label="x-axis of this panel"><option value="">page's</option>
      ${xAxes.map((a) => `<option value="${esc(a.id)}">${esc(a.label)}</option>`).join("")}</select></label>
    <form data-panel-control="add-key"><input list="metric-key-list" name="key" placeholder="+ key" aria-label="add a key to this panel"></form>
    <button type="button" data-panel-control="remove" title="remove this panel from the view">remove</button>`;
  panel.obj.root.insertBefore(row, panel.obj.el);
  const logy = row.querySelector("[data-panel-control=logy]");
  const x = row.querySelector("[data-panel-control=x]");
  logy.checked = panel.obj.isLog;
  x.value = panel.x || "";
  logy.onchange = () => { panel.obj.logDefault = false; panel.obj.logY = logy.checked; onChange(panel, "logy"); };
  x.onchange = () => { panel.x = x.value || null; panel.obj.range = null; panel.zoomed = null; onChange(panel, "x"); };
  row.querySelector("form").onsubmit = (e) => {
    e.preventDefault();
    const input = e.target.elements.key;
    const key = input.value.trim();
    if (!knownKeys().has(key)) { input.setCustomValidity(`no key ${key}`); input.reportValidity(); return; }
    input.setCustomValidity(""); input.value = "";
    if (!panel.keys.includes(key)) { panel.keys.push(key); onChange(panel, "keys"); }
  };
  row.querySelector("[data-panel-control=remove]").onclick = () => onRemove(panel);
  return { syncLog: () => { logy.checked = panel.obj.isLog; } };
}

// fn(el) once the element comes within `margin` of the viewport: panels fetch their data only
// when they are about to be seen, so a layout of 200 panels costs what the first screen costs.
function lazy(margin = "400px") {
  const waiting = new Map();
  const io = new IntersectionObserver((entries) => {
    const due = entries.filter((e) => e.isIntersecting && waiting.has(e.target));
    for (const e of due) { io.unobserve(e.target); }
    const fns = due.map((e) => { const fn = waiting.get(e.target); waiting.delete(e.target); return fn; });
    if (fns.length) fns.forEach((fn) => fn());
  }, { rootMargin: margin });
  return {
    watch(el, fn) { waiting.set(el, fn); io.observe(el); },
    forget(el) { waiting.delete(el); io.unobserve(el); },
  };
}

function nearViewport(el, margin = 400) {
  const r = el.getBoundingClientRect();
  return r.bottom > -margin && r.top < (window.innerHeight || 900) + margin && r.width > 0;
}

// --- saved views ----------------------------------------------------------------------------
function csrfToken() {
  try { return JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"] || ""; } catch (err) { return ""; }
}

async function send(method, url, body) {
  const response = await fetch(url, { method, credentials: "same-origin",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
    body: body === undefined ? undefined : JSON.stringify(body) });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = (answer.errors || []).map((e) => `${e.field}: ${e.message}`).join("; ");
    throw new Error(`${answer.error || `HTTP ${response.status}`}${detail ? ` (${detail})` : ""}`);
  }
  return answer;
}

// The views bar: choose a saved view of the project (the page reloads with ?view=<id>), or save
// the current layout under a name (the project's default on request) and get its link.
// capture() returns the view's state. Also window.OPLViews, for pages that embed the charts.
// `after`: a promise the list waits for (the compare page's first draw); saving waits for the list.
function viewsBar(box, views, capture, { after = Promise.resolve() } = {}) {
  if (!box || !views || !views.project) return null;
  const current = views.current;
  box.innerHTML = `<label>view <select data-control="view" aria-label="saved view"><option value="">curated panels</option>${
      current ? `<option value="${current.id}" selected>${esc(current.name)}</option>` : ""}</select></label>
    <input type="text" data-control="view-name" placeholder="name this view" aria-label="view name" maxlength="100" value="${esc(current ? current.name : "")}">
    <label class="check" title="the project's default: applied to its runs' pages"><input type="checkbox" data-control="view-default"${current && current.default ? " checked" : ""}> project default</label>
    <button type="button" data-action="save-view">Save view</button>
    <a data-show="view-link" ${current ? `href="${esc(views.open_url + current.id)}/"` : "hidden"}>link to this view</a>
    <span class="view-status" data-show="view-status" role="status"></span>`;
  const select = box.querySelector("[data-control=view]");
  const status = box.querySelector("[data-show=view-status]");
  const link = box.querySelector("[data-show=view-link]");
  const state = { list: [] };
  // The list holds summaries (id, name, author, default, panels); a view's state comes with the page
  // that applies it (views.current), one view at a time.
  async function load() {
    state.list = (await M.getJSON(views.list_url)).views;
    select.innerHTML = `<option value="">curated panels</option>` + state.list.map((v) =>
      `<option value="${v.id}" title="${esc(`${v.panels} panel(s), by ${v.owner || "a former member"}`)}">` +
      `${esc(v.name)}${v.default ? " (project default)" : ""}</option>`).join("");
    select.value = current ? String(current.id) : "";
  }
  select.onchange = () => {
    const url = new URL(location.href);
    if (select.value) url.searchParams.set("view", select.value); else url.searchParams.delete("view");
    location.href = url.href;
  };
  async function save(name, isDefault) {
    await listed.catch(() => {});
    const existing = state.list.find((v) => v.name === name);
    const body = { name, page: views.page, state: capture(), default: Boolean(isDefault) };
    const saved = existing
      ? await send("PATCH", views.detail_url + existing.id, body)
      : await send("POST", views.list_url, body);
    const url = new URL(location.href);
    url.searchParams.set("view", String(saved.id));
    history.replaceState(null, "", url.href);
    link.hidden = false; link.href = `${views.open_url}${saved.id}/`;
    await load();
    select.value = String(saved.id);
    return saved;
  }
  box.querySelector("[data-action=save-view]").onclick = async () => {
    const name = box.querySelector("[data-control=view-name]").value.trim();
    if (!name) { status.textContent = "name the view first"; return; }
    status.textContent = "saving…";
    try {
      const saved = await save(name, box.querySelector("[data-control=view-default]").checked);
      status.textContent = `saved “${saved.name}”`;
      box.dataset.saved = String(saved.id);
    } catch (err) { status.textContent = `not saved: ${err.message}`; }
  };
  const listed = after.catch(() => {}).then(load);
  listed.catch((err) => { status.textContent = `views unavailable: ${err.message}`; });
  const api = { current: () => current, capture, save, list: () => load().then(() => state.list) };
  window.OPLViews = api; // for a page's own scripts, outside the modules
  return api;
}

export { applyLayout, customPanel, panelSpec, keyBrowser, keyList, panelControls, lazy, nearViewport,
  viewsBar, prefixOf };
