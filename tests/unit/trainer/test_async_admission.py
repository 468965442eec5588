"""Async admission: simulated against any interleaving, no sample ever exceeds max_staleness."""

from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.rollout.async_gen import admissible


@settings(max_examples=300, deadline=None)
@given(
    U=st.integers(1, 4),
    sync_every=st.integers(1, 4),
    extra=st.integers(0, 8),
    schedule=st.lists(st.booleans(), min_size=1, max_size=200),
)
def test_admitted_batches_never_exceed_max_staleness(U, sync_every, extra, schedule):
    """The generator and trainer take turns in an arbitrary order (True = generator acts)."""
    max_staleness = U - 1 + sync_every - 1 + extra  # the least the config allows, plus slack
    version, published = 0, 0  # trainer's update count; weights the generator can load
    produced, consumed, committed = 0, 0, 0
    queue: list[int] = []  # versions of the batches waiting
    worst = 0
    for generator_turn in schedule + [False] * 50:
        if generator_turn:
            if admissible(committed, produced, consumed, U, published, max_staleness):
                queue.append(published)
                produced += 1
        elif queue:
            v = queue.pop(0)
            consumed += 1
            committed = version + U
            for _ in range(U):
                worst = max(worst, version - v)
                version += 1
                if version % sync_every == 0:
                    published = version
    assert worst <= max_staleness


def test_an_empty_queue_always_admits_after_the_latest_sync():
    # the trainer waits for data: the bound must then be met by the newest published weights
    assert admissible(committed=8, produced=4, consumed=4, updates_per_batch=2, weights_version=7, max_staleness=2)
