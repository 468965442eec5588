#!/usr/bin/env bash
# Build static/vendor/plotly-<version>-opl.min.js: plotly.js with only the trace types the
# dashboard's static/js draws (entry.js: scatter, heatmap, parcoords), 1.3 MB instead of the full
# bundle's 4.8 MB, so the browser parses it in a fraction of the time before any chart can start.
# The built file is committed; CI and `make` never run this.
#
# To rebuild (after a plotly.js upgrade or a new trace type in entry.js):
#     cd scripts/plotly && npm ci && bash build.sh      # or: npm run build
# The versions are pinned here (package.json, package-lock.json), apart from the root package.json,
# so that `make lint`'s `npm ci` does not install plotly.js and its dependencies. plotly.js 4 asks
# for Node.js 22 (npm warns on 20), but only its sources are read here: esbuild does the bundling.
# The same inputs give the same bytes. After a version change, point the templates at the new file
# (grep -rn "vendor/plotly" templates) and git rm the old one.
set -euo pipefail
cd "$(dirname "$0")"
version=$(node -p 'require("plotly.js/package.json").version')
out=../../static/vendor/plotly-${version}-opl.min.js
# plotly.js's own licence header (MIT), as at the top of its dist/ bundles
banner=$(sed -n '1,/\*\//p' node_modules/plotly.js/dist/plotly.min.js)
# V8's explicit compile hint, first: Chromium compiles every function of the file on a background
# thread while it streams, instead of on the page's main thread the first time each is called (the
# first chart of a page drew in ~85 ms instead of ~135; benchmarks/workspace.py).
banner="//# allFunctionsCalledOnLoad
${banner}
/* Custom bundle: plotly.js ${version} core (scatter), heatmap and parcoords; built by scripts/plotly/build.sh */"
node build.mjs "$out" "$banner"
ls -l "$out"
