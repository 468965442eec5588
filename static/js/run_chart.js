// Reward chart of one run, refreshed by polling while the run is active.
(function () {
  const el = document.getElementById("reward-chart");
  if (!el) return;
  const TERMINAL = ["succeeded", "failed", "cancelled", "lost"];
  const toNumber = (v) => (typeof v === "string" ? null : v); // "NaN"/"Infinity" -> gap

  async function refresh() {
    const [series, run] = await Promise.all([
      fetch(`${el.dataset.url}?key=${encodeURIComponent(el.dataset.key)}`).then((r) => r.json()),
      fetch(el.dataset.runUrl).then((r) => r.json()),
    ]);
    const x = series.points.map((p) => p[0]);
    const y = series.points.map((p) => toNumber(p[1]));
    Plotly.react(el, [{ x, y, mode: "lines+markers", name: el.dataset.key }], {
      title: { text: el.dataset.key },
      xaxis: { title: { text: "model updates" } },
      margin: { t: 40, r: 10, b: 40, l: 50 },
      hovermode: "x unified",
    }, { displaylogo: false, responsive: true });
    document.getElementById("run-state").textContent = run.state;
    document.getElementById("run-state").className = `state state-${run.state}`;
    document.getElementById("run-reason").textContent = run.state_reason || "–";
    document.getElementById("run-progress").textContent = run.total_steps ? `${run.step} / ${run.total_steps}` : run.step;
    el.dataset.points = String(series.points.length);
    return TERMINAL.includes(run.state);
  }

  async function loop() {
    let done = false;
    try { done = await refresh(); } catch (e) { console.warn("chart refresh failed", e); }
    if (!done) setTimeout(loop, document.hidden ? 10000 : 2000);
  }
  loop();
})();
