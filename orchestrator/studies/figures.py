"""PNG figures of a study, drawn by the product's own compare page in headless Chromium.

Each figure opens /compare/?runs=...&group=<field> as a logged-in user, waits for the page to
draw, and asks Plotly for a PNG of one panel with its legend and a title (the page itself shows one
shared legend beside the charts, which a lone image would lose). Playwright is a test dependency:
without it, or without Chromium, the caller gets a clear error, not a document without figures.
"""

from __future__ import annotations

import base64
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

CHROMIUM = os.environ.get("OPL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
WIDTH, HEIGHT = 900, 420

# Runs in the page: the panel's figure with a title and its legend, as a PNG data URL.
_TO_PNG = """async ([panel, title, width, height]) => {
  const gd = document.querySelector(`.panel-chart[data-panel="${panel}"]`);
  if (!gd || !gd.data || !gd.data.length) return null;
  const layout = {...gd.layout, showlegend: true, width, height, title: {text: title, font: {size: 14}},
                  margin: {t: 48, r: 16, b: 110, l: 60}, legend: {orientation: "h", x: 0, y: -0.2, yanchor: "top"}};
  return await Plotly.toImage({data: gd.data, layout}, {format: "png", width, height});
}"""


# Grouped views draw mean and band traces (no per-run lines): wait for any trace with points.
_HAS_DATA = """p => { const el = document.querySelector(`.panel-chart[data-panel="${p}"]`);
  return Boolean(el && el.data && el.data.some((t) => t.x && t.x.length && !(t.meta && t.meta.role === "threshold"))); }"""


class FigureError(RuntimeError):
    pass


@dataclass(frozen=True)
class FigureSpec:
    filename: str
    caption: str
    run_ids: list[int]
    group: str  # config field the compare page groups by (mean and min-max band per group)
    panel: str  # panel id (orchestrator/metrics/panels.py)


def _chromium() -> str:
    path = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if not path:
        raise FigureError(f"Chromium not found at {CHROMIUM} (set OPL_CHROMIUM, or install Debian's chromium package)")
    return path


def capture(
    base_url: str, session_cookie: tuple[str, str], specs: list[FigureSpec], out_dir: Path, timeout_ms: int = 60_000
) -> list[Path]:
    """Write one PNG per spec into out_dir. Playwright's sync API runs in a thread of its own, so a
    caller that already drives a browser in this thread (a test) can call it too."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(_capture, base_url, session_cookie, specs, out_dir, timeout_ms).result()


def _capture(base_url, session_cookie, specs, out_dir: Path, timeout_ms: int) -> list[Path]:
    try:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise FigureError("playwright is not installed: pip install -r requirements-test.txt") from None
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1440, "height": 1000})
            context.add_cookies([{"name": session_cookie[0], "value": session_cookie[1], "url": base_url}])
            page = context.new_page()
            for spec in specs:
                try:
                    written.append(_one(page, base_url, spec, out_dir, timeout_ms))
                except PlaywrightError as exc:  # a timeout: the page never drew that panel's data
                    raise FigureError(
                        f"{spec.filename}: the compare page drew no '{spec.panel}' data ({str(exc).splitlines()[0]})"
                    ) from None
        finally:
            browser.close()
    return written


def _one(page, base_url: str, spec: FigureSpec, out_dir: Path, timeout_ms: int) -> Path:
    query = urlencode({"runs": ",".join(map(str, spec.run_ids)), "group": spec.group})
    page.goto(f"{base_url.rstrip('/')}/compare/?{query}", timeout=timeout_ms)
    page.wait_for_selector('#compare[data-ready="1"]', timeout=timeout_ms)
    page.wait_for_function(_HAS_DATA, arg=spec.panel, timeout=timeout_ms)
    data_url = page.evaluate(_TO_PNG, [spec.panel, spec.caption, WIDTH, HEIGHT])
    if not data_url:
        raise FigureError(f"{spec.filename}: the compare page drew no '{spec.panel}' panel")
    path = out_dir / spec.filename
    path.write_bytes(base64.b64decode(data_url.split(",", 1)[1]))
    return path
