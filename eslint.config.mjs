// eslint for the dashboard's browser code: the recommended rules. The chart code is ES modules
// (metrics_core.js holds the shared chart functions, metrics_workspace.js the panels and views;
// run_chart.js and metrics_compare.js import both; plotly_text.js escapes what Plotly draws, for
// them and sweep_glance.js); the small page scripts stay classic scripts.
// Plotly and htmx come from vendored bundles as globals.
import js from "@eslint/js";
import globals from "globals";

export default [
  { ignores: ["static/vendor/**", "**/staticfiles/**", "node_modules/**"] },
  js.configs.recommended,
  {
    files: ["static/js/**/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "script",
      globals: { ...globals.browser, Plotly: "readonly", htmx: "readonly" },
    },
    rules: {
      "no-unused-vars": ["error", { argsIgnorePattern: "^_", caughtErrors: "none" }],
      eqeqeq: ["error", "smart"],
      "prefer-const": ["error", { destructuring: "all" }],
      "no-var": "error",
    },
  },
  {
    files: [
      "static/js/metrics_core.js",
      "static/js/metrics_workspace.js",
      "static/js/run_chart.js",
      "static/js/metrics_compare.js",
      "static/js/plotly_text.js",
      "static/js/sweep_glance.js",
    ],
    languageOptions: { sourceType: "module" },
  },
];
