// A sweep at a glance (templates/metrics/_sweep_glance.html): parallel coordinates over the
// sweep's axes and one summary, coloured by the summary, and a scatter of the summary against
// one axis. Data: GET data-src (/api/v1/metrics/glance) with key, stat; redrawn on each choice.
// A module (run before DOMContentLoaded); it starts at DOMContentLoaded: by then every deferred
// script, Plotly's among them, has run. Every config field, value, run name and key it hands
// Plotly goes through plotlyText: Plotly would draw their markup (a config key's <a href>) as links.
import { plotlyText, plotlyValue } from "./plotly_text.js";

document.addEventListener("DOMContentLoaded", function () {

  const root = document.getElementById("sweep-glance");
  if (!root) return;
  if (!window.Plotly) {
    // the page loads Plotly only when it has charts to draw: no run has logged a metric yet
    root.querySelector(".glance-note").textContent = "No run has logged a metric yet.";
    return;
  }
  const keySelect = root.querySelector("select[name=key]");
  const statSelect = root.querySelector("select[name=stat]");
  const axisSelect = root.querySelector("select[name=axis]");
  const note = root.querySelector(".glance-note");
  const parcoords = document.getElementById("glance-parcoords");
  const scatter = document.getElementById("glance-scatter");
  const layoutBase = { margin: { l: 60, r: 40, t: 50, b: 40 }, font: { size: 12 } };
  let latest = null;

  function numeric(values) {
    return values.every((v) => typeof v === "number");
  }

  // A categorical axis becomes indices 0..n-1 with the values as tick labels. Parcoords draws its
  // tick labels as plain SVG text (escaped they would read "&lt;"), its axis labels as markup.
  function dimension(label, values) {
    if (numeric(values)) return { label: plotlyText(label), values };
    const distinct = [...new Set(values.map(String))].sort();
    return {
      label: plotlyText(label),
      values: values.map((v) => distinct.indexOf(String(v))),
      tickvals: distinct.map((_, i) => i),
      ticktext: distinct,
    };
  }

  function fillSelect(select, options, chosen) {
    select.replaceChildren(
      ...options.map(([value, text]) => {
        const option = document.createElement("option");
        option.value = value;
        option.textContent = text;
        option.selected = value === chosen;
        return option;
      }),
    );
  }

  function draw(data) {
    if (!data.key) {
      note.textContent = "No run has logged a metric yet.";
      root.dataset.ready = "1";
      return;
    }
    latest = data;
    fillSelect(keySelect, data.keys.map((k) => [k, k]), data.key);
    fillSelect(statSelect, Object.entries(data.stats), data.stat);
    const previousAxis = axisSelect.value;
    fillSelect(axisSelect, data.axes.map((a) => [a, a]), data.axes.includes(previousAxis) ? previousAxis : data.axes[0]);
    const rows = data.runs.filter((r) => r.value !== null);
    const missing = data.runs.length - rows.length;
    const summary = `${data.key} (${data.stat})`;
    note.textContent =
      `${rows.length} run(s) on ${data.axes.length} axis(es)` +
      (missing ? `; ${missing} without a finite ${summary} are left out` : "") +
      (data.axes.length ? "" : ": the runs differ in no config field but the seed");
    root.dataset.runs = String(rows.length);
    const dimensions = data.axes.map((a) => dimension(a, rows.map((r) => r.axes[a])));
    dimensions.push({ label: plotlyText(summary), values: rows.map((r) => r.value) });
    const colours = rows.map((r) => r.value);
    Plotly.react(
      parcoords,
      [
        {
          type: "parcoords",
          dimensions,
          line: { color: colours, colorscale: "Viridis", showscale: true, colorbar: { title: { text: plotlyText(data.stat) } } },
          ids: rows.map((r) => String(r.id)),
        },
      ],
      // room above the axes for the title and the axis labels, which parcoords draws over them
      { ...layoutBase, margin: { ...layoutBase.margin, t: 100 }, title: { text: `Sweep at a glance: ${plotlyText(summary)}`, y: 0.98 } },
      { responsive: true, displaylogo: false },
    );
    drawScatter();
    root.dataset.ready = "1";
  }

  function drawScatter() {
    if (!latest) return;
    const axis = axisSelect.value;
    const rows = latest.runs.filter((r) => r.value !== null);
    Plotly.react(
      scatter,
      [
        {
          type: "scatter",
          mode: "markers",
          x: rows.map((r) => plotlyValue(axis ? r.axes[axis] : r.name)),
          y: rows.map((r) => r.value),
          text: rows.map((r) => `${plotlyText(r.name)} (run ${r.id})`),
          customdata: rows.map((r) => r.id),
          hovertemplate: "%{text}<br>%{x}: %{y:.4g}<extra></extra>",
          marker: { color: rows.map((r) => r.value), colorscale: "Viridis", size: 9 },
        },
      ],
      {
        ...layoutBase,
        title: { text: plotlyText(`${latest.key} (${latest.stat}) against ${axis || "run"}`) },
        xaxis: { title: { text: plotlyText(axis || "run") }, type: rows.length && numeric(rows.map((r) => r.axes[axis])) ? "linear" : "category" },
        yaxis: { title: { text: plotlyText(latest.key) } },
      },
      { responsive: true, displaylogo: false },
    );
  }

  function load() {
    const url = new URL(root.dataset.src, window.location.origin);
    if (keySelect.value) url.searchParams.set("key", keySelect.value);
    if (statSelect.value) url.searchParams.set("stat", statSelect.value);
    root.dataset.ready = "0";
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then((answer) => answer.json().then((body) => ({ ok: answer.ok, body })))
      .then(({ ok, body }) => {
        if (!ok) throw new Error(body.message || "could not load the sweep");
        draw(body);
      })
      .catch((error) => {
        note.textContent = String(error.message || error);
      });
  }

  keySelect.addEventListener("change", load);
  statSelect.addEventListener("change", load);
  axisSelect.addEventListener("change", drawScatter);
  // Fetched and drawn when it comes near the viewport: below the charts, its parcoords (WebGL)
  // should not hold up their first draw.
  const near = new IntersectionObserver((entries) => {
    if (!entries.some((e) => e.isIntersecting)) return;
    near.disconnect();
    load();
  }, { rootMargin: "400px" });
  near.observe(root);
});
