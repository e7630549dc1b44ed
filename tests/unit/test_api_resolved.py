"""What a server reports it resolved (issue 34 §4): the profiler records it beside the
table, and a serving server's report is compared with that record where both give one."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api.resolved import (
    MAX_VALUE_CHARS,
    clean_resolved,
    resolved_drift,
    resolved_report,
)
from sps_operator.profiler.server_info import server_context_from_info


def info(**top: Any) -> dict[str, Any]:
    state = {
        "dspark_info_record": {"mode": "static", "components": ["core", "step_cpu_time"],
                               "simulate_acc_len": 1.0, "verify_num_draft_tokens": 4,
                               "gamma": 3},
        "cuda_graph_config": {"decode": {"bs": [1, 2, 4]}},
        "effective_max_running_requests_per_dp": 8,
    }  # fmt: skip
    state.update(top.pop("state", {}))
    return {"speculative_algorithm": "DSPARK", "internal_states": [state], "tp_size": 8, **top}


ENV = {"SGLANG_SPEC_TP_SYNC": "all", "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "1",
       "SGLANG_RAGGED_VERIFY_MODE": "static", "SGLANG_EXPOSE_OWN_ENV_VARS": "1"}  # fmt: skip


def test_the_profiler_records_what_the_server_resolved_in_its_manifest() -> None:
    report = info(world_size=16, disaggregation_mode="null", state={"env_vars": ENV})
    context = server_context_from_info(report, base_url="http://x", offdiagonal=False)
    server = json.loads(json.dumps(context.to_dict()))  # what the manifest holds
    assert server["resolved"] == {
        "world_size": 16,
        "disaggregation_mode": "null",
        # only the compared variables: not the mode the clone sets, not the switches it adds
        "env": {"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "1", "SGLANG_SPEC_TP_SYNC": "all"},
    }
    # The record is beside the fingerprint, not in it (a --resume keeps working).
    # (disaggregation_mode is a ServerArgs field, so it is in the cost arguments too.)
    plain = server_context_from_info(
        info(disaggregation_mode="null"), base_url="http://x", offdiagonal=False
    )
    assert plain.resolved == {"disaggregation_mode": "null"}
    assert plain.fingerprint == context.fingerprint


def test_an_older_server_reports_nothing_and_nothing_drifts() -> None:
    assert resolved_report(info()) == {}
    recorded = resolved_report(info(world_size=8, state={"env_vars": ENV}))
    assert resolved_drift(recorded, resolved_report(info())) == []


def test_a_drift_the_pod_spec_cannot_show_is_seen() -> None:
    recorded = resolved_report(info(world_size=8, disaggregation_mode="null",
                                    state={"env_vars": ENV}))  # fmt: skip
    # The same server: an env var at its default is the same as unset; a switch spelled
    # otherwise is the same switch.
    same_env = {
        "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "true",
        "SGLANG_RAGGED_VERIFY_MODE": "compact",
    }
    same = resolved_report(info(world_size=8, disaggregation_mode="null",
                                state={"env_vars": same_env}))  # fmt: skip
    assert resolved_drift(recorded, same) == []
    # An envFrom Secret set a variable; the server resolved another world size.
    drifted_env = {**same_env, "SGLANG_DSPARK_FAST_KERNEL": "0"}
    drifted = resolved_report(info(world_size=16, disaggregation_mode="null",
                                   state={"env_vars": drifted_env}))  # fmt: skip
    assert resolved_drift(recorded, drifted) == [
        "world_size: 8 -> 16 (reported by the server)",
        "SGLANG_DSPARK_FAST_KERNEL: unset -> false (the server's own environment, as it "
        "resolved it)",
    ]
    # A server that does not expose its environment is compared on the rest only.
    assert resolved_drift(recorded, {"world_size": 8}) == []


keys = st.sampled_from(
    ["world_size", "disaggregation_mode", "env", "env_vars", "internal_states",
     "SGLANG_SPEC_TP_SYNC"]
) | st.text(max_size=5)  # fmt: skip
untrusted = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=300),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)


@given(a=untrusted, b=untrusted)
def test_any_report_is_read_bounded_or_ignored(a: Any, b: Any) -> None:
    for raw in (a, b):
        got = resolved_report(raw)
        assert clean_resolved(got) == got  # the cleaned form is a fixed point
        assert set(got) <= {"world_size", "disaggregation_mode", "env"}
        text = json.dumps(got)
        assert len(text) < 64 * 1024
        for value in (got.get("env") or {}).values():
            assert isinstance(value, str) and len(value) <= MAX_VALUE_CHARS
    lines = resolved_drift(a, b)
    assert all(isinstance(line, str) for line in lines)
    assert resolved_drift(a, a) == [] and resolved_drift(b, b) == []
