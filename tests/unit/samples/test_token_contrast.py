"""A token's text keeps WCAG AA contrast (4.5:1) on its log-ratio background at every strength,
masked or not: the text colour comes from the CSS (--fg in app.css; white for .tok.strong in
samples.css), the background from the span's own style, laid over the white card."""

import re
from pathlib import Path

from orchestrator.samples.tokens import SCALES, token_spans

CSS = Path(__file__).resolve().parents[3] / "static" / "css"


def contrast(a, b) -> float:
    """WCAG 2 contrast ratio of two sRGB colours."""

    def luminance(rgb):
        lin = [(c / 255) / 12.92 if c / 255 <= 0.03928 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def hex_rgb(text: str) -> tuple[int, ...]:
    text = text.lstrip("#")
    text = "".join(c * 2 for c in text) if len(text) == 3 else text
    return tuple(int(text[i : i + 2], 16) for i in (0, 2, 4))


def test_every_token_reads_at_aa_on_its_background():
    fg = hex_rgb(re.search(r"--fg:\s*(#[0-9a-fA-F]{3,6})", (CSS / "app.css").read_text()).group(1))
    samples = (CSS / "samples.css").read_text()
    strong = hex_rgb(re.search(r"\.tok\.strong\s*\{\s*color:\s*(#[0-9a-fA-F]{3,6})", samples).group(1))
    strike = re.search(r"\.tok-masked\.strong\s*\{\s*text-decoration-color:\s*(#[0-9a-fA-F]{3,6})", samples)
    worst, strikes = [], []
    for scale in SCALES:
        ratios = [sign * scale * i / 100 for sign in (-1, 1) for i in range(1, 151)]
        html = token_spans(["x"] * len(ratios), ratios, masked=list(range(len(ratios))), clipped=[], scale=scale)
        for classes, rgba in re.findall(r'class="([^"]*)"[^>]*style="background:rgba\(([^)]*)\)"', html):
            r, g, b, a = (float(v) for v in rgba.split(","))
            background = tuple(a * c + (1 - a) * 255 for c in (r, g, b))
            text = strong if "strong" in classes.split() else fg
            worst.append(contrast(text, background))
            if "strong" in classes.split():
                strikes.append(background)
    assert len(worst) == len(SCALES) * 300
    assert min(worst) >= 4.5
    assert strike, "a masked token's strike-through on a strong background: .tok-masked.strong"
    assert min(contrast(hex_rgb(strike.group(1)), bg) for bg in strikes) >= 4.5
