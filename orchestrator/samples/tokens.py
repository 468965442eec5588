"""A sample's response as coloured token spans: the one place that turns tokens into HTML.

Each token is a <span class="tok [tok-masked|tok-clipped|tok-reweighted|tok-null|tok-only]" data-i
data-log-ratio data-flag [data-entropy data-other] title> whose background is its log ratio
log(pi_theta / pi_behaviour) on a diverging scale (blue: the current policy likes the token less
than the one that generated it; red: more), saturating at ± `scale`. Masked, clipped and
reweighted tokens (the flags of the correction shown: the run's own, or one it recorded
counterfactually) are also marked by class, so they read without colour; beside a second
correction, the tokens the two mark differently are outlined (`tok-only`). Every token's text is
escaped (a token may be "<script>").
"""

from __future__ import annotations

import math

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from orchestrator.samples import marks

SCALES = (0.05, 0.2, 0.5, 1.0, 2.0)  # the choices offered; log ratio where the colour saturates
DEFAULT_SCALE = 0.5
NEGATIVE = (29, 78, 216)  # blue
POSITIVE = (185, 28, 28)  # red
TEXT = (0x1D, 0x24, 0x30)  # the page's text colour (--fg in app.css); white on strong backgrounds
AA = 4.5  # WCAG AA contrast for body text
STRONG = 0.6  # from this strength on, the token's text is white


def luminance(rgb) -> float:
    """WCAG relative luminance of an sRGB colour (0-255 channels)."""

    def linear(c: float) -> float:
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a, b) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def over_white(rgb, alpha: float) -> tuple[float, float, float]:
    return tuple(alpha * c + (1 - alpha) * 255 for c in rgb)


def _alpha_where(base, ok, lo: float, hi: float, want_high: bool) -> float:
    """The alpha in [lo, hi] nearest the middle of the scale where ok(background) still holds."""
    for _ in range(40):
        mid = (lo + hi) / 2
        if ok(over_white(base, mid)) == want_high:
            hi = mid
        else:
            lo = mid
    return hi if want_high else lo


# The alpha of a token's background on either side of STRONG: dark text up to the most alpha that
# keeps AA with it, white text from the least alpha that gives AA with white. Between the two no
# text colour reaches AA, so the scale steps over it.
_DARK_MAX = {
    base: _alpha_where(base, lambda bg: contrast(TEXT, bg) >= AA, 0.0, 1.0, want_high=False)
    for base in (NEGATIVE, POSITIVE)
}
_WHITE_MIN = {
    base: _alpha_where(base, lambda bg: contrast((255, 255, 255), bg) >= AA, 0.0, 1.0, want_high=True)
    for base in (NEGATIVE, POSITIVE)
}


def strength(log_ratio: float | None, scale: float) -> float:
    if log_ratio is None or not math.isfinite(log_ratio):
        return 0.0
    return min(1.0, abs(log_ratio) / scale)


def alpha(log_ratio: float, scale: float) -> float:
    base, s = (POSITIVE if log_ratio > 0 else NEGATIVE), strength(log_ratio, scale)
    if s < STRONG:
        return 0.08 + (_DARK_MAX[base] - 0.005 - 0.08) * s / STRONG  # a margin for the 3 digits written
    return _WHITE_MIN[base] + 0.005 + (0.945 - _WHITE_MIN[base]) * (s - STRONG) / (1 - STRONG)


def colour(log_ratio: float | None, scale: float) -> str:
    """CSS background of a log ratio: transparent at 0, full colour at |lr| >= scale; the text on
    it (dark under STRONG, white from it) keeps WCAG AA contrast at every strength."""
    if log_ratio is None or not math.isfinite(log_ratio) or log_ratio == 0:
        return "transparent"
    r, g, b = POSITIVE if log_ratio > 0 else NEGATIVE
    return f"rgba({r},{g},{b},{alpha(log_ratio, scale):.3f})"


def _shown(token: str) -> str:
    if token == "":
        return "∅"
    return token.replace("\n", "↵\n").replace("\t", "⇥\t")


def flag_of(i: int, masked: set[int], clipped: set[int], reweighted: frozenset[int] | set[int] = frozenset()) -> str:
    return "masked" if i in masked else "clipped" if i in clipped else "reweighted" if i in reweighted else ""


def token_spans(
    tokens: list[str],
    log_ratios: list[float | None],
    masked: list[int],
    clipped: list[int],
    scale: float = DEFAULT_SCALE,
    *,
    reweighted: list[int] = (),
    entropy: list[float | None] | None = None,
    other: tuple[str, str] | None = None,
) -> SafeString:
    """The spans of one response under one correction's marks (`masked`, `clipped`, `reweighted`).
    `entropy`: per token, shown on hover. `other`: (name, marks string) of a correction shown beside
    this one; a token the two mark differently gets `tok-only` and data-other (the other's mark)."""
    masked_set, clipped_set, reweighted_set = set(masked), set(clipped), set(reweighted)
    parts = []
    for i, token in enumerate(tokens):
        lr = log_ratios[i] if i < len(log_ratios) else None
        h = entropy[i] if entropy and i < len(entropy) else None
        flag = flag_of(i, masked_set, clipped_set, reweighted_set)
        classes = (
            "tok"
            + (f" tok-{flag}" if flag else "")
            + (" tok-null" if lr is None else "")
            + (" strong" if strength(lr, scale) >= STRONG else "")
        )
        if i in masked_set and i in clipped_set:
            classes += " tok-clipped"
        shown_lr = "null" if lr is None else f"{lr:.6g}"
        ratio = "" if lr is None else f" (ratio ×{math.exp(max(-50.0, min(50.0, lr))):.3g})"
        title = (
            f"#{i} {token!r} · log ratio {'n/a' if lr is None else f'{lr:+.4f}'}{ratio}"
            + ("" if h is None else f" · entropy {h:.3g}")
            + (f" · {flag}" if flag else "")
        )
        extra = "" if h is None else f' data-entropy="{h:.4g}"'
        if other is not None:
            theirs = marks.mark_at(other[1], i)
            if theirs != flag:
                classes += " tok-only"
                title += f" · {other[0]}: {theirs or 'kept as is'}"
                extra += f' data-other="{theirs}"'
        parts.append(
            f'<span class="{classes}" data-i="{i}" data-log-ratio="{shown_lr}" data-flag="{flag}"{extra} '
            f'style="background:{colour(lr, scale)}" title="{escape(title)}">{escape(_shown(token))}</span>'
        )
    return mark_safe("".join(parts))


def legend_stops(scale: float) -> list[dict]:
    """The legend's swatches, -scale .. +scale."""
    return [
        {
            "value": v,
            "label": f"{v:+g}" if v else "0",
            "colour": colour(v, scale),
            "strong": strength(v, scale) >= STRONG,
        }
        for v in (-scale, -scale / 2, -scale / 10, 0.0, scale / 10, scale / 2, scale)
    ]
