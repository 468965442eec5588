"""The msgspec fast path and the plain-Python path accept the same batches and read them alike."""

import json
import math

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.metrics.schemas import (
    BatchError,
    WirePoint,
    _fast_columns,
    _struct_columns,
    decode_batch,
    parse_columns,
)

good_row = st.fixed_dictionaries(
    {
        "step": st.integers(0, 10**6),
        "key": st.sampled_from(["train/reward_mean", "actor/m2", "eval/aime24@acc"]),
        "value": st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(-(10**6), 10**6),
            st.sampled_from(["NaN", "Infinity", "-Infinity"]),
        ),
        "time": st.one_of(st.floats(1e9, 2e9), st.integers(0, 10)),
    }
)
any_row = st.fixed_dictionaries(
    {
        "step": st.one_of(st.integers(0, 50), st.integers(-3, -1), st.just(True), st.just(2.0)),
        "key": st.sampled_from(["train/reward_mean", "bad key", "", "a" * 201, "a//b"]),
        "value": st.one_of(
            st.floats(), st.integers(), st.sampled_from(["NaN", "nan", "1.5"]), st.booleans(), st.none()
        ),
        "time": st.one_of(st.floats(1e9, 2e9), st.just(math.inf), st.just("now")),
    }
)
# Mostly valid batches, some with one doubtful row, some with a repeated (key, step).
rows = st.tuples(st.lists(good_row, max_size=30), st.lists(any_row, max_size=1), st.booleans()).map(
    lambda t: t[0] + t[1] + (t[0][:1] if t[2] else [])
)


def as_tuples(cols):
    return list(zip(cols.keys, cols.steps, [repr(v) for v in cols.values], cols.specials, cols.times, strict=True))


@settings(max_examples=300, deadline=None)
@given(rows)
def test_whatever_the_fast_path_takes_the_plain_path_reads_the_same(batch):
    try:
        fast = _struct_columns(msgspec.convert(batch, list[WirePoint]))
    except msgspec.ValidationError:
        fast = None
    plain = _fast_columns(batch)
    if fast is not None:
        assert plain is not None and as_tuples(fast) == as_tuples(plain)
    try:
        parsed = parse_columns(batch)
    except BatchError:
        assert fast is None and plain is None  # refused only when no path accepts it
    else:
        assert plain is None or as_tuples(parsed) == as_tuples(plain)


@settings(max_examples=200, deadline=None)
@given(rows, st.one_of(st.none(), st.integers(1, 3), st.just(True)))
def test_a_body_decoded_by_msgspec_gives_the_columns_of_the_json_path(batch, attempt):
    body = {"points": batch} if attempt is None else {"attempt": attempt, "points": batch}
    try:
        raw = json.dumps(body, allow_nan=False).encode()
    except ValueError:
        return  # NaN/inf floats cannot be sent as JSON at all
    decoded = decode_batch(raw)
    if decoded is None:
        return
    assert decoded[0] == attempt and attempt is not True
    assert as_tuples(decoded[1]) == as_tuples(parse_columns(json.loads(raw)["points"]))


@pytest.mark.parametrize("body", [b"{", b'{"points": [{"step": 1}]}', b'{"points": "x"}', b"[]"])
def test_malformed_bodies_go_to_the_path_that_explains_them(body):
    assert decode_batch(body) is None
