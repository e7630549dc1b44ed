"""The one bounded parser of JSON others can write (api/untrusted_json.py, issue 33 §2):
it returns a value or Unreadable, never raises, and its bounds hold for any text."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sps_operator.api.untrusted_json import (
    MAX_INT_DIGITS,
    Unreadable,
    nesting_depth,
    read_json,
    read_json_object,
    readable,
)

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63) + 1, 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_any_text_is_a_value_or_unreadable_never_an_exception(text: str) -> None:
    value = read_json(text, max_bytes=1024, max_depth=4)
    assert readable(value) or isinstance(value, Unreadable)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20_000), st.sampled_from(["[", '{"a":', '[{"k":']), st.booleans())
def test_deep_nesting_is_unreadable_at_any_depth(depth: int, opener: str, closed: bool) -> None:
    """Reproduced (issue 33 §2): 4,000 bytes of brackets in a borrow record raised
    RecursionError out of reconcile()."""
    closer = {"[": "]", '{"a":': "}", '[{"k":': "}]"}[opener]
    text = opener * depth + ("1" + closer * depth if closed else "")
    value = read_json(text, max_bytes=10**6, max_depth=32)
    if depth * opener.count("[") + depth * opener.count("{") > 32:
        assert isinstance(value, Unreadable) and "deep" in value.why
    else:
        assert readable(value) or not closed


@settings(max_examples=200, deadline=None)
@given(JSON_VALUES)
def test_what_fits_the_bounds_reads_back_exactly(value: Any) -> None:
    text = json.dumps(value)
    got = read_json(text, max_bytes=len(text.encode()), max_depth=max(depth_of(value), 1))
    assert got == value or (isinstance(value, float) and math.isnan(value))


@settings(max_examples=100, deadline=None)
@given(JSON_VALUES)
def test_size_and_depth_bounds_are_exact(value: Any) -> None:
    text = json.dumps(value)
    size = len(text.encode())
    assert isinstance(read_json(text, max_bytes=size - 1), Unreadable)
    depth = depth_of(value)
    assert nesting_depth(text, depth) == depth
    if depth >= 1:
        assert isinstance(read_json(text, max_bytes=size, max_depth=depth - 1), Unreadable)


@given(st.integers(2**63, 10**30) | st.integers(-(10**30), -(2**63)))
def test_integers_beyond_int64_are_unreadable(number: int) -> None:
    value = read_json(f'{{"replicas": {number}}}', max_bytes=100)
    assert isinstance(value, Unreadable) and "range" in value.why


def test_numbers_json_cannot_carry_are_unreadable() -> None:
    for text in ("NaN", "[Infinity]", "-Infinity", "1e999", "9" * (MAX_INT_DIGITS + 1)):
        assert isinstance(read_json(text, max_bytes=10_000), Unreadable), text
    assert read_json("[NaN]", max_bytes=10, non_finite=True)[0] != 0  # kept for named checks


def test_not_text_and_not_an_object() -> None:
    assert isinstance(read_json(None, max_bytes=10), Unreadable)
    assert isinstance(read_json(b"{}", max_bytes=10), Unreadable)
    assert isinstance(read_json_object("[1]", max_bytes=10), Unreadable)
    assert read_json_object('{"a": "[[["}', max_bytes=20, max_depth=1) == {"a": "[[["}
