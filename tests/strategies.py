"""Hypothesis strategies shared by the property tests of everything that parses outside
input (a profiling Job's result, a server's /server_info, a container's command line)."""

from __future__ import annotations

from hypothesis import strategies as st

# Any JSON scalar, NaN and infinities included (Python's json writes and reads them).
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
# Any JSON value, nested a little.
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=20,
)
