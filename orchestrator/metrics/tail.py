"""The tail of a series, one rule for every reader (run summaries, filters, studies): the last 10% of
its step span. Plain arithmetic, importable without Django."""

TAIL_DIVISOR = 10


def tail_start(first_step: int, last_step: int) -> int:
    """The first step of a key's tail: the last 10% of its step span."""
    return last_step - (last_step - first_step) // TAIL_DIVISOR
