"""Which tokens one correction drops that another keeps, and the reverse, with their entropy:
"M2PO keeps the high-entropy tokens that clip throws away" is the paper's claim, and
these tallies let a user check it on a run's own recorded samples. Plain functions over rows the
selectors read; no database.

"Dropped" is masked or clipped (marks.DROPS): the token carries no gradient under that correction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.samples import marks


@dataclass
class Tally:
    """Tokens, how many of them had A < 0, and their mean entropy (over those with one)."""

    n: int = 0
    negative: int = 0
    entropy_sum: float = 0.0
    entropy_n: int = 0

    def add(self, entropy: float | None, negative: bool) -> None:
        self.n += 1
        self.negative += negative
        if entropy is not None:
            self.entropy_sum += entropy
            self.entropy_n += 1

    def merge(self, other: Tally) -> None:
        self.n += other.n
        self.negative += other.negative
        self.entropy_sum += other.entropy_sum
        self.entropy_n += other.entropy_n

    @property
    def entropy(self) -> float | None:
        return self.entropy_sum / self.entropy_n if self.entropy_n else None


@dataclass
class Contrast:
    """One step's (or a whole run's) tallies of corrections `a` and `b`."""

    step: int | None = None
    samples: int = 0
    missing: int = 0  # samples where a or b was not recorded (left out of the tallies)
    tokens: Tally = field(default_factory=Tally)
    a_drops: Tally = field(default_factory=Tally)
    b_drops: Tally = field(default_factory=Tally)
    a_only: Tally = field(default_factory=Tally)  # dropped by a, kept by b
    b_only: Tally = field(default_factory=Tally)  # dropped by b, kept by a

    def merge(self, other: Contrast) -> None:
        self.samples += other.samples
        self.missing += other.missing
        for name in ("tokens", "a_drops", "b_drops", "a_only", "b_only"):
            getattr(self, name).merge(getattr(other, name))

    @property
    def both(self) -> int:
        return self.a_drops.n - self.a_only.n


@dataclass(frozen=True)
class Row:
    """One recorded train sample, as the contrast needs it: the marks strings of a and b (None
    when not recorded), per-token entropy, and the sample's advantage."""

    step: int
    a: str | None
    b: str | None
    entropy: list[float | None]
    advantage: float | None
    n_tokens: int


def contrast_sample(row: Row, into: Contrast) -> None:
    into.samples += 1
    if row.a is None or row.b is None:
        into.missing += 1
        return
    negative = row.advantage is not None and row.advantage < 0
    a_drop, b_drop = marks.dropped(row.a), marks.dropped(row.b)
    for i in range(row.n_tokens):
        h = row.entropy[i] if i < len(row.entropy) else None
        into.tokens.add(h, negative)
        if i in a_drop:
            into.a_drops.add(h, negative)
            if i not in b_drop:
                into.a_only.add(h, negative)
        if i in b_drop:
            into.b_drops.add(h, negative)
            if i not in a_drop:
                into.b_only.add(h, negative)


def contrast_steps(rows: list[Row]) -> tuple[list[Contrast], Contrast]:
    """Per recorded step (newest first) and over all of them."""
    steps: dict[int, Contrast] = {}
    for row in rows:
        contrast_sample(row, steps.setdefault(row.step, Contrast(step=row.step)))
    total = Contrast()
    for c in steps.values():
        total.merge(c)
    return sorted(steps.values(), key=lambda c: -c.step), total
