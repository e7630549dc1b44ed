"""Property tests: whatever a server answers, the profiler's parsers either return valid
values or refuse with the profiler's own error type and a message — never a bare exception.

Budget and seed are fixed for `make test` (derandomized); set SPS_FUZZ_EXAMPLES for a longer
run on demand, e.g. `SPS_FUZZ_EXAMPLES=20000 pytest tests/unit/test_profiler_untrusted.py`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_profiler_server_info import info

from sps_operator.profiler.rounds import STEP_CPU_MS_MAX, RoundError, rows_from_payload
from sps_operator.profiler.server_info import (
    ServerCheckError,
    server_context_from_info,
    validate_sweep,
)
from sps_operator.profiler.untrusted import json_int, json_number
from strategies import json_values

FUZZ = settings(
    derandomize=True,
    max_examples=int(os.environ.get("SPS_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Values a field may take: mostly plausible, sometimes anything at all.
plausible_ints = st.one_of(st.integers(min_value=-3, max_value=600), json_values)


# Paths into a good /server_info, each replaced by a drawn value.
FIELDS: list[tuple[str, ...]] = [
    ("speculative_algorithm",),
    ("disable_cuda_graph",),
    ("dp_size",),
    ("tokenizer_path",),
    ("vocab_size",),
    ("internal_states",),
    ("internal_states", "0"),
    ("internal_states", "0", "dp_size"),
    ("internal_states", "0", "cuda_graph_config"),
    ("internal_states", "0", "cuda_graph_config", "decode"),
    ("internal_states", "0", "cuda_graph_config", "decode", "bs"),
    ("internal_states", "0", "cuda_graph_config", "decode", "max_bs"),
    ("internal_states", "0", "cuda_graph_config", "decode", "backend"),
    ("internal_states", "0", "effective_max_running_requests_per_dp"),
    ("internal_states", "0", "memory_usage"),
    ("internal_states", "0", "memory_usage", "token_capacity"),
    ("internal_states", "0", "dspark_info_record"),
    ("internal_states", "0", "dspark_info_record", "mode"),
    ("internal_states", "0", "dspark_info_record", "gamma"),
    ("internal_states", "0", "dspark_info_record", "verify_num_draft_tokens"),
    ("internal_states", "0", "dspark_info_record", "components"),
    ("internal_states", "0", "dspark_info_record", "simulate_acc_len"),
]


def _set(data: Any, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data[int(key)] if isinstance(data, list) else data[key]
    if isinstance(data, list):
        data[int(path[-1])] = value
    else:
        data[path[-1]] = value


@st.composite
def server_infos(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)  # not even a /server_info
    data = info(dp=draw(st.integers(1, 3)))
    for path in draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
        # An earlier replacement may have removed the path.
        with contextlib.suppress(KeyError, IndexError, TypeError, ValueError):
            _set(data, path, draw(st.one_of(plausible_ints, json_values)))
    return data


@FUZZ
@given(server_infos(), st.booleans())
def test_server_info_parses_to_a_valid_context_or_a_clear_refusal(
    info: Any, offdiagonal: bool
) -> None:
    try:
        ctx = server_context_from_info(info, base_url="http://x", offdiagonal=offdiagonal)
    except ServerCheckError as exc:
        assert str(exc)
        return
    assert ctx.dp_size >= 1 and ctx.verify_num_draft_tokens >= 2
    assert ctx.gamma == ctx.verify_num_draft_tokens - 1
    assert all(isinstance(b, int) and b >= 1 for b in ctx.capture_bs)
    assert ctx.tiers == sorted(set(ctx.tiers))
    json.dumps(ctx.to_dict(), default=str)
    try:
        warnings = validate_sweep(ctx, [1, 2, 4], input_len=242, max_new_tokens=254)
    except ServerCheckError as exc:
        assert str(exc)
    else:
        assert all(isinstance(w, str) for w in warnings)


record_fields = st.fixed_dictionaries(
    {},
    optional={
        "forward_ct": plausible_ints,
        "num_running_reqs": plausible_ints,
        "bs": plausible_ints,
        "num_verify_tokens": plausible_ints,
        "step_cpu_ms": st.one_of(st.floats(allow_nan=True), plausible_ints),
        "budget": plausible_ints,
        "verify_tokens_local": plausible_ints,
    },
)
payloads = st.one_of(
    json_values,
    st.fixed_dictionaries({"records": st.one_of(st.lists(record_fields, max_size=6), json_values)}),
)


@FUZZ
@given(payloads)
def test_records_parse_to_valid_rows_or_a_clear_refusal(payload: Any) -> None:
    try:
        rows = rows_from_payload(payload, 0)
    except RoundError as exc:
        assert str(exc)
        return
    for row in rows:
        assert 0 < row.step_time <= STEP_CPU_MS_MAX / 1000
        assert all(
            isinstance(v, int)
            for v in (row.forward_ct, row.num_running_reqs, row.num_verify_tokens)
        )
        assert row.budget is None or isinstance(row.budget, int)
        assert row.verify_tokens_local is None or row.verify_tokens_local >= 0


@FUZZ
@given(json_values)
def test_json_numbers_are_exactly_what_json_carries(value: Any) -> None:
    as_int = json_int(value)
    if as_int is not None:
        assert not isinstance(value, bool) and as_int == value
    as_number = json_number(value)
    if as_number is not None:
        assert math.isfinite(as_number) and as_number == value


def test_integers_a_float_cannot_hold_are_refused_not_rounded() -> None:
    # Found by the property test above: 2**53 + 1 read back as 2**53; 10**400 made
    # float() raise OverflowError out of the profiler.
    assert json_number(2**53) == 2**53
    assert json_number(-(2**53)) == -(2**53)
    assert json_number(2**53 + 1) is None
    assert json_number(10**400) is None


def test_the_cases_issue_9_names_get_messages() -> None:
    data = info()
    data["internal_states"][0]["cuda_graph_config"]["decode"]["bs"] = ["a"]
    try:
        server_context_from_info(data, base_url="http://x", offdiagonal=False)
    except ServerCheckError as exc:
        assert "decode.bs must list batch sizes" in str(exc)
    else:
        raise AssertionError("capture bs ['a'] was accepted")
    zero = {"records": [{"forward_ct": 3, "num_running_reqs": 1, "step_cpu_ms": 0}]}
    try:
        rows_from_payload(zero, 0)
    except RoundError as exc:
        assert "step_cpu_ms=0" in str(exc) and "(0, 1000] ms" in str(exc)
    else:
        raise AssertionError("step_cpu_ms = 0 was accepted")
