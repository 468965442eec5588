"""The production Content-Security-Policy (orchestrator/settings.py) allows scripts from this
site's files only: no inline scripts, no inline event handlers, no eval. htmx's hx-on, hx-vars
and `js:` values are evaluated with Function(), so they count as eval. Every template is read
for any of these, which would work in development and silently break behind HTTPS."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "an inline <script> (move it to static/js/)": re.compile(
        r"<script(?![^>]*\bsrc=)(?![^>]*application/(ld\+)?json)[^>]*>", re.I
    ),
    "an inline event handler (use a static/js listener)": re.compile(r"\son[a-z]+\s*=\s*[\"']", re.I),
    "htmx hx-on / hx-vars (evaluated: needs 'unsafe-eval')": re.compile(
        r"\s(data-)?hx-(on[:\-][\w:.-]*|on|vars)\s*=", re.I
    ),
    "a js: value (evaluated: needs 'unsafe-eval')": re.compile(
        r"hx-(vals|headers|request)\s*=\s*[\"']\s*(js|javascript):", re.I
    ),
    "a javascript: URL": re.compile(r"href\s*=\s*[\"']\s*javascript:", re.I),
}


def templates():
    yield from (ROOT / "templates").rglob("*.html")
    yield from (ROOT / "orchestrator").glob("*/templates/**/*.html")


def test_no_template_needs_inline_script_or_eval():
    found = [
        f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}: {what}"
        for path in templates()
        for text in [path.read_text()]
        for what, pattern in FORBIDDEN.items()
        for m in pattern.finditer(text)
    ]
    assert found == [], "\n".join(found)


def test_the_check_finds_each_kind():
    samples = [
        "<script>alert(1)</script>",
        '<form onsubmit="return confirm(1)">',
        '<div hx-on::after-swap="x()">',
        "<div hx-vals='js:{a: b}'>",
        '<a href="javascript:void(0)">',
    ]
    for sample, pattern in zip(samples, FORBIDDEN.values(), strict=True):
        assert pattern.search(sample), sample
    assert not any(
        p.search('<script src="/static/x.js"></script> <div hx-vals=\'{"seen": "1"}\'>') for p in FORBIDDEN.values()
    )
