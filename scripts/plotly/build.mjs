// esbuild settings of plotly.js's own esbuild-config.js, less what the three traces never reach.
import { build } from "esbuild";

const [outfile, banner] = process.argv.slice(2);
await build({
  entryPoints: ["entry.js"],
  outfile,
  format: "iife",
  globalName: "Plotly",
  bundle: true,
  minify: true,
  legalComments: "eof", // the bundled packages' licence comments, as plotly.js's dist keeps them
  banner: { js: banner },
  alias: { regl: "@plotly/regl" },
  // src/registry.js requires maplibre-gl's CSS when a map trace registers; none does here
  loader: { ".css": "empty" },
  define: { global: "window", "define.amd": "false", "process.env.NODE_DEBUG": "false" },
  target: "es2016",
  logLevel: "warning",
});
