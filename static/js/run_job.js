// The run page's job card (templates/cluster/_run_job.html) is swapped every 5 s. Its stdout and
// stderr tails open at their last lines and follow new ones, unless the reader scrolled up in one:
// then the swap keeps their place. (A script file rather than hx-on attributes, which need eval.)
(function () {
  let kept = {};
  document.addEventListener("htmx:beforeSwap", (event) => {
    if (event.detail.target.id !== "run-job") return;
    kept = Object.fromEntries([...event.detail.target.querySelectorAll("pre.log")].map(
      (e) => [e.id, e.scrollTop + e.clientHeight < e.scrollHeight - 8 ? e.scrollTop : null]));
  });
  document.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target.id !== "run-job") return;
    event.detail.target.querySelectorAll("pre.log").forEach((e) => {
      e.scrollTop = kept[e.id] == null ? e.scrollHeight : kept[e.id];
    });
  });
})();
