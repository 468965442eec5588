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
NEGATIVE = (37, 99, 235)  # blue
POSITIVE = (220, 38, 38)  # red


def strength(log_ratio: float | None, scale: float) -> float:
    if log_ratio is None or not math.isfinite(log_ratio):
        return 0.0
    return min(1.0, abs(log_ratio) / scale)


def colour(log_ratio: float | None, scale: float) -> str:
    """CSS background of a log ratio: transparent at 0, full colour at |lr| >= scale."""
    if log_ratio is None or not math.isfinite(log_ratio) or log_ratio == 0:
        return "transparent"
    r, g, b = POSITIVE if log_ratio > 0 else NEGATIVE
    return f"rgba({r},{g},{b},{0.08 + 0.77 * strength(log_ratio, scale):.2f})"


STRONG = 0.6  # from this strength on, the token's text is white


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
