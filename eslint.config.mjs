// eslint for the dashboard's browser code: the recommended rules, in browser scripts that
// share a few globals (Plotly and htmx from vendored bundles, OPLCharts from metrics_core.js).
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
];
