// The new-experiment form: the preset dropdown says when the form no longer is that preset, and
// the sweep preview (shown right under the sweep section) is scrolled into view when it arrives.
(function () {
  "use strict";
  const form = document.getElementById("experiment-form");
  const preset = document.getElementById("preset");
  if (!form || !preset) return;
  let edited = null;
  function markEdited(event) {
    if (edited || !event.isTrusted) return;
    const chosen = preset.selectedOptions[0];
    const label = chosen && chosen.value ? `${chosen.textContent.trim()} (edited)` : "— edited by hand —";
    edited = new Option(label, "", true, true);
    edited.disabled = true;
    edited.dataset.edited = "1";
    preset.add(edited, 0);
    preset.selectedIndex = 0;
  }
  form.addEventListener("input", markEdited);
  form.addEventListener("change", markEdited);
  document.body.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target && event.detail.target.id === "preview") {
      event.detail.target.scrollIntoView({ block: "start" });
    }
  });
})();
