// Plotly reads every string it draws (trace and legend names, axis and chart titles, tick labels,
// hover text, annotations) as a small HTML subset: `<a href>` becomes a real link, `<b>`, `<br>`
// format. Config keys and values, run names and metric keys come from whoever logged them, so
// each one is escaped before it reaches Plotly and is drawn as the text it is. Markup the page
// writes itself (a hovertemplate's `<br>`, `<extra>`) goes around escaped values, never through.
const ENTITIES = { "&": "&amp;", "<": "&lt;", ">": "&gt;" };

export function plotlyText(value) {
  return String(value).replace(/[&<>]/g, (c) => ENTITIES[c]);
}

// A data value: strings escaped (a category on an axis, in a hover), numbers and nulls as they are.
export function plotlyValue(value) {
  return typeof value === "string" ? plotlyText(value) : value;
}
