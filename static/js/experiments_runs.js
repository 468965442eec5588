// Runs table: keep the "Compare selected" link pointing at /compare/?runs=1,2,3 for the ticked runs.
// The table is re-rendered by htmx (filter, sort, page), so listen on the document.
(function () {
  function update() {
    const link = document.getElementById("compare-link");
    if (!link) return;
    const ids = Array.prototype.map.call(document.querySelectorAll(".compare-box:checked"), function (box) { return box.value; });
    link.href = link.dataset.base + (ids.length ? "?runs=" + ids.join(",") : "");
    link.setAttribute("aria-disabled", ids.length < 1 ? "true" : "false");
    link.textContent = ids.length ? "Compare " + ids.length + " selected" : "Compare selected";
  }
  document.addEventListener("change", function (event) {
    if (event.target.id === "select-all") {
      document.querySelectorAll(".compare-box").forEach(function (box) { box.checked = event.target.checked; });
    }
    if (event.target.id === "select-all" || event.target.classList.contains("compare-box")) update();
  });
  document.addEventListener("htmx:afterSwap", update);
})();

// Forms that ask first (data-confirm), e.g. "Cancel sweep": a script rather than an inline
// onsubmit handler, which a Content-Security-Policy without 'unsafe-inline' would block.
document.addEventListener("submit", function (event) {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
