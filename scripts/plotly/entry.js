// The trace types static/js draws: scatter (in core: lines, markers, bands), heatmap (the compare
// page's metric over two fields) and parcoords (the sweep at a glance). A new trace type in
// static/js needs its lib/ module here and a rebuild (build.sh).
const Plotly = require("plotly.js/lib/core");

Plotly.register([require("plotly.js/lib/heatmap"), require("plotly.js/lib/parcoords")]);

module.exports = Plotly;
