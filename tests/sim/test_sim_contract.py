"""Contract tests (dspark-http-contract §11.7 and §2-§6) against the running HTTP server.

Everything here talks HTTP to a live simulator; nothing calls engine internals.
"""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

import httpx
import pytest
from sim_contract_helpers import (
    TIMEOUT,
    generate,
    rank_records,
    run_round,
    server_info,
    set_pin,
)

from sps_operator.api.hashing import content_hash
from sps_sim.testing import running_sim
from waiting import wait_for

SCALE = 400.0
K = 8
GAMMA = 7
FRACS = [0.1, 0.25, 0.5, 0.75, 1.0]
NON_FLAT_TABLE = (
    '{"sample_batch_tokens":[1,2],"sample_steps_per_sec":[1.0,1.0],"max_batch_tokens":2}'
)
FLAT_TABLE = '{"sample_batch_tokens":[1],"sample_steps_per_sec":[1.0],"max_batch_tokens":384}'
DEFAULT_KEYS = {
    "bs": -1,
    "mode": "",
    "budget": None,
    "lag_steps": None,
    "num_running_reqs": -1,
    "num_verify_tokens": -1,
    "verify_tokens_local": -1,
    "verify_tokens_dp_synced": -1,
    "verify_tokens_graph_key": -1,
    "predicted_step_ms": None,
    "predicted_theta": None,
    "step_cpu_ms": None,
}


def tiers_from_server_info(info: dict[str, Any]) -> list[int]:
    """§9.3: tiers from what /server_info reports (approximates the runner filter)."""
    state = info["internal_states"][0]
    k = state["dspark_info_record"]["verify_num_draft_tokens"]
    bs_list = state["cuda_graph_config"]["decode"]["bs"]
    pool = state["effective_max_running_requests_per_dp"]
    tiers = {b * k for b in bs_list if b <= pool}
    if max(bs_list) > pool:
        tiers.add(pool * k)
    return sorted(tiers)


def tier_of(tiers: list[int], m: int) -> int:
    return min(t for t in tiers if t >= m)


def pinned_budget_and_m(frac: float, bs: int) -> tuple[int, int]:
    """§4.2 written out here, not imported, so the simulator is checked against the contract."""
    budget = int(frac * (bs * GAMMA))
    return budget, min(bs + budget, bs * K)


def compact_env() -> dict[str, str]:
    return {"SGLANG_RAGGED_VERIFY_MODE": "compact"}


def write_table(tmp_path: Path, text: str) -> str:
    path = tmp_path / "table.json"
    path.write_text(text)
    return str(path)


# ---------------------------------------------------------------- §11.7 diagonal


@pytest.mark.parametrize(
    "dp_args",
    [[], ["--dp-size", "2"], ["--dp-size", "2", "--enable-dp-attention"]],
    ids=["dp1", "dp2", "dp2-attention"],
)
def test_diagonal_aligned_steps_verify_bs_times_k(dp_args: list[str]) -> None:
    dp = 2 if dp_args else 1
    with running_sim(dp_args, time_scale=SCALE) as url:
        for bs in (1, 5, 16):
            rnd = run_round(url, bs_per_rank=bs, dp_size=dp)
            aligned = rnd.aligned(bs)
            assert len(aligned) == dp
            assert len(aligned[0]) >= 30
            for rows in aligned:
                for row in rows:
                    assert row["num_verify_tokens"] == bs * K
                    assert row["mode"] == "static"
                    # static: no budget planner fields
                    assert not {"budget", "lag_steps", "verify_tokens_local"} & set(row)


# ---------------------------------------------------------------- §11.7 pinned compact


def _pinned_sweep(url: str, bs: int) -> dict[float, list[dict[str, Any]]]:
    out = {}
    for frac in FRACS:
        rnd = run_round(url, bs_per_rank=bs, frac=frac)
        out[frac] = rnd.aligned(bs)[0]
        assert len(out[frac]) >= 30
    return out


@pytest.mark.parametrize("setup", ["bug-off-no-table", "non-flat-table", "additive-table"])
def test_pinned_compact_fixed_server_replays_tier_of_pinned_m(setup: str, tmp_path: Path) -> None:
    if setup == "bug-off-no-table":
        args = ["--verify-all-bug", "off"]
    elif setup == "non-flat-table":
        args = ["--speculative-dspark-sps-table-path", write_table(tmp_path, NON_FLAT_TABLE)]
    else:
        additive = {
            "bias_seconds": 0.01,
            "bs_probes": [1, 100],
            "alpha_seconds": [0.0, 0.05],
            "m_probes": [1, 200],
            "theta_seconds": [0.0, 0.02],
        }
        args = ["--speculative-dspark-sps-table-path", write_table(tmp_path, json.dumps(additive))]
    bs = 16
    with running_sim(args, env=compact_env(), time_scale=SCALE) as url:
        tiers = tiers_from_server_info(server_info(url))
        sweep = _pinned_sweep(url, bs)
    observed = []
    for frac, rows in sweep.items():
        budget, m = pinned_budget_and_m(frac, bs)
        for row in rows:
            assert row["budget"] == budget
            assert row["verify_tokens_local"] == m
            assert row["lag_steps"] == 2
            assert row["num_verify_tokens"] == tier_of(tiers, m)
            assert row["num_verify_tokens"] >= m
        observed.append(rows[0]["num_verify_tokens"])
    assert observed == sorted(observed), "num_verify_tokens must be non-decreasing in frac"
    assert len(set(observed)) >= 3


def test_pinned_budget_uses_server_order_of_operations() -> None:
    # frac=0.3, bs=6, gamma=15: server int(0.3*(6*15)) = 27; client int(0.3*6*15) = 26.
    args = ["--speculative-dspark-block-size", "15", "--verify-all-bug", "off"]
    with running_sim(args, env=compact_env(), time_scale=SCALE) as url:
        rows = run_round(url, bs_per_rank=6, frac=0.3).aligned(6)[0]
    assert rows and all(r["budget"] == 27 for r in rows)
    assert all(r["verify_tokens_local"] == 33 for r in rows)


# ---------------------------------------------------------------- §11.7 verify-all bug


@pytest.mark.parametrize("table", [None, FLAT_TABLE], ids=["no-table", "flat-table"])
def test_verify_all_bug_replays_full_width_and_is_detectable(
    table: str | None, tmp_path: Path
) -> None:
    args = []
    if table is not None:
        args = ["--speculative-dspark-sps-table-path", write_table(tmp_path, table)]
    bs = 16
    with running_sim(args, env=compact_env(), time_scale=SCALE) as url:
        info = server_info(url)
        tiers = tiers_from_server_info(info)
        sweep = _pinned_sweep(url, bs)
    full = tier_of(tiers, bs * K)
    flagged = 0
    for frac, rows in sweep.items():
        budget, m = pinned_budget_and_m(frac, bs)
        for row in rows:
            # budget / verify_tokens_local still show the pin ...
            assert row["budget"] == budget
            assert row["verify_tokens_local"] == m
            # ... while the replayed graph is always the full-width tier
            assert row["num_verify_tokens"] == full
        # §9.3 robust check: expected tier below full width, observed full width => bug
        if tier_of(tiers, m) < full and rows[0]["num_verify_tokens"] == full:
            flagged += 1
    assert flagged == len(FRACS) - 1  # every frac but 1.0 exposes it
    # §9.4: flat across fracs although expected tiers differ
    assert len({rows[0]["num_verify_tokens"] for rows in sweep.values()}) == 1


def test_verify_all_bug_step_times_are_flat_across_fracs() -> None:
    bs = 32
    with running_sim(["--noise-cv", "0"], env=compact_env(), time_scale=SCALE) as url:
        sweep = _pinned_sweep(url, bs)
    medians = [statistics.median(r["step_cpu_ms"] for r in rows[10:]) for rows in sweep.values()]
    assert max(medians) / min(medians) < 1.05


def test_cap_accept_reports_scheduled_sum_but_runs_full_width() -> None:
    bs = 16
    env = {"SGLANG_RAGGED_VERIFY_MODE": "cap-accept"}
    with running_sim(["--noise-cv", "0"], env=env, time_scale=SCALE) as url:
        lo = run_round(url, bs_per_rank=bs, frac=0.25).aligned(bs)[0]
        hi = run_round(url, bs_per_rank=bs, frac=1.0).aligned(bs)[0]
    assert all(r["num_verify_tokens"] == r["verify_tokens_local"] == 16 + 28 for r in lo)
    assert all(r["num_verify_tokens"] == 128 for r in hi)
    lo_ms = statistics.median(r["step_cpu_ms"] for r in lo[10:])
    hi_ms = statistics.median(r["step_cpu_ms"] for r in hi[10:])
    assert abs(lo_ms / hi_ms - 1) < 0.05  # the forward itself is full width


# ---------------------------------------------------------------- §11.7 step_cpu_ms


def test_step_cpu_ms_in_range_and_absent_after_prefill() -> None:
    with running_sim(["--dp-size", "2"], time_scale=SCALE) as url:
        rnd = run_round(url, bs_per_rank=8, dp_size=2, max_new_tokens=30)
    for rows in rnd.rows:
        assert rows, "decode records expected on every rank"
        first = rows[0]
        assert "step_cpu_ms" not in first  # first decode step after the prefill
        # forward_ct counts the prefill too: the first decode record is not ct 1
        assert first["forward_ct"] >= 2
        timed = [r["step_cpu_ms"] for r in rows[1:]]
        assert len(timed) == len(rows) - 1
        assert all(0 < ms <= 1000 for ms in timed)
        cts = [r["forward_ct"] for r in rows]
        assert cts == sorted(cts) and len(set(cts)) == len(cts)


def test_first_decode_step_after_prefill_has_no_budget_and_runs_full_width() -> None:
    bs = 16
    with running_sim(["--verify-all-bug", "off"], env=compact_env(), time_scale=SCALE) as url:
        tiers = tiers_from_server_info(server_info(url))
        rows = run_round(url, bs_per_rank=bs, frac=0.25).rows[0]
    first, second = rows[0], rows[1]
    assert "budget" not in first and "verify_tokens_local" not in first
    assert first["num_verify_tokens"] == tier_of(tiers, bs * K)
    assert first["lag_steps"] == 2
    assert second["budget"] == 28


def test_step_cpu_ms_is_in_model_units_whatever_the_time_scale() -> None:
    from sps_sim.costmodel import PRESETS
    from sps_sim.truth import truth_grid

    bs = 8
    truth = truth_grid(
        PRESETS["NVIDIA-H100-80GB-HBM3"],
        gamma=GAMMA,
        batch_sizes=[bs],
        capture_bs=list(range(1, 9)),
        max_running_per_dp=48,
    )
    true_ms = next(r["seconds"] for r in truth if r["diagonal"]) * 1000
    for scale in (100.0, 2000.0):
        with running_sim(time_scale=scale, preset="NVIDIA-H100-80GB-HBM3") as url:
            rows = run_round(url, bs_per_rank=bs, max_new_tokens=400).aligned(bs)[0]
        median = statistics.median(r["step_cpu_ms"] for r in rows[100:])
        assert abs(median / true_ms - 1) < 0.03, (scale, median, true_ms)


def test_gpu_presets_give_visibly_different_step_times() -> None:
    medians = {}
    for product in (
        "NVIDIA-H100-80GB-HBM3",
        "NVIDIA-H200",
        "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
    ):
        with running_sim(env={"SPS_SIM_GPU_PRODUCT": product}, time_scale=SCALE) as url:
            assert server_info(url)["sps_sim"]["preset"] == product
            rows = run_round(url, bs_per_rank=32, max_new_tokens=60).aligned(32)[0]
        medians[product] = statistics.median(r["step_cpu_ms"] for r in rows[10:])
    values = sorted(medians.values())
    assert all(b / a > 1.1 for a, b in itertools.pairwise(values)), medians


# ---------------------------------------------------------------- /server_info shape


def test_server_info_shape_per_dp_rank() -> None:
    args = [
        "--dp-size",
        "2",
        "--enable-dp-attention",
        "--max-running-requests",
        "96",
        "--tp-size",
        "4",
    ]
    with running_sim(args, time_scale=SCALE) as url:
        info = server_info(url)
        alias = httpx.get(url + "/get_server_info", timeout=TIMEOUT).json()
    assert alias["internal_states"][0]["dp_size"] == 2
    assert info["speculative_algorithm"] == "DSPARK"
    assert info["tp_size"] == 4 and info["disable_cuda_graph"] is False
    assert info["speculative_num_draft_tokens"] == K
    states = info["internal_states"]
    assert len(states) == 2
    for state in states:
        assert state["dp_size"] == 2
        assert state["effective_max_running_requests_per_dp"] == 48
        decode = state["cuda_graph_config"]["decode"]
        assert decode["backend"] == "full"
        assert decode["max_bs"] == 512  # H100 class with tp >= 4
        assert decode["bs"][:9] == [1, 2, 3, 4, 5, 6, 7, 8, 10]
        assert decode["bs"][-1] == 512
        assert state["memory_usage"]["token_capacity"] > 0
        payload = state["dspark_info_record"]
        assert payload["mode"] == "static"
        assert payload["gamma"] == GAMMA
        assert payload["verify_num_draft_tokens"] == K
        assert payload["components"] == ["core", "step_cpu_time"]
        assert payload["simulate_acc_len"] == 1.0
        assert payload["records"] == []


def test_no_record_payload_without_components_and_null_acc_len() -> None:
    with running_sim(time_scale=SCALE, profiling_env=False) as url:
        states = server_info(url)["internal_states"]
        assert all("dspark_info_record" not in s for s in states)
    env = {"SGLANG_DSPARK_DEBUG_DUMP": "all"}
    with running_sim(time_scale=SCALE, profiling_env=False, env=env) as url:
        payload = server_info(url)["internal_states"][0]["dspark_info_record"]
    assert payload["simulate_acc_len"] is None
    assert payload["components"] == sorted(payload["components"])
    assert {"core", "step_cpu_time", "step_gpu_time", "reqs"} <= set(payload["components"])


def test_records_omit_default_valued_fields() -> None:
    with running_sim(env=compact_env(), time_scale=SCALE) as url:
        run_round(url, bs_per_rank=4, frac=0.5)
        static_rows = rank_records(url)[0]
    with running_sim(time_scale=SCALE) as url:
        run_round(url, bs_per_rank=4)
        static_rows += rank_records(url)[0]
    assert static_rows
    for row in static_rows:
        assert "forward_ct" in row
        for key, default in DEFAULT_KEYS.items():
            if key in row:
                assert row[key] != default, (key, row)
        assert "verify_tokens_dp_synced" not in row


def test_ring_buffer_keeps_only_the_newest_records() -> None:
    with running_sim(["--record-ring-size", "25"], time_scale=SCALE) as url:
        generate(url, 2, 80)
        rows = rank_records(url)[0]
    assert len(rows) == 25
    cts = [r["forward_ct"] for r in rows]
    assert cts == sorted(cts)
    assert cts[-1] == 80  # 1 prefill + 79 decode steps: forward_ct of the last decode


def test_dp_attention_ranks_step_in_lockstep() -> None:
    args = ["--dp-size", "2", "--enable-dp-attention"]
    with running_sim(args, time_scale=SCALE) as url:
        generate(url, 3, 30)  # rank 0 gets 2 requests, rank 1 gets 1
        rows = rank_records(url)
    cts = [[r["forward_ct"] for r in rank] for rank in rows]
    assert cts[0] == cts[1]
    assert {r["bs"] for r in rows[0]} == {2} and {r["bs"] for r in rows[1]} == {1}
    for a, b in zip(rows[0][1:], rows[1][1:], strict=True):
        assert a["step_cpu_ms"] == b["step_cpu_ms"]  # one shared wall interval


# ---------------------------------------------------------------- /set_internal_state


def test_set_internal_state_returns_one_bool_per_rank() -> None:
    with running_sim(["--dp-size", "3"], time_scale=SCALE) as url:
        assert set_pin(url, 0.5).json() == [True, True, True]
        assert set_pin(url, 1).json() == [True, True, True]
        for bad in (0, 1.5, -0.1):
            resp = set_pin(url, bad)
            assert resp.status_code == 200 and resp.json() == [False, False, False]
        resp = httpx.post(
            url + "/set_internal_state",
            json={"server_args": {"dspark_force_budget_frac": "0.5"}},
            timeout=TIMEOUT,
        )
        assert resp.json() == [True, True, True]
        resp = httpx.post(
            url + "/set_internal_state",
            json={"server_args": {"dspark_force_budget_frac": 0.25, "no_such_knob": 1}},
            timeout=TIMEOUT,
        )
        assert resp.json() == [False, False, False]
        resp = httpx.put(
            url + "/set_internal_state",
            json={"server_args": {"pp_max_micro_batch_size": 8}},
            timeout=TIMEOUT,
        )
        assert resp.json() == [True, True, True]
        state = server_info(url)["internal_states"][0]
        assert state["pp_max_micro_batch_size"] == 8


def test_rejected_update_applies_nothing() -> None:
    with running_sim(["--verify-all-bug", "off"], env=compact_env(), time_scale=SCALE) as url:
        assert set_pin(url, 0.25).json() == [True]
        resp = httpx.post(
            url + "/set_internal_state",
            json={"server_args": {"dspark_force_budget_frac": 1.0, "bogus": 1}},
            timeout=TIMEOUT,
        )
        assert resp.json() == [False]
        rows = run_round(url, bs_per_rank=16).aligned(16)[0]
    assert {r["budget"] for r in rows} == {28}  # still the 0.25 pin


def test_null_pin_is_a_400_with_the_real_error_body() -> None:
    with running_sim(time_scale=SCALE) as url:
        resp = set_pin(url, None)
    assert resp.status_code == 400
    body = resp.json()
    assert set(body) == {"object", "message", "type", "param", "code"}
    assert body["object"] == "error" and body["type"] == "Bad Request"
    assert body["code"] == 400 and body["param"] is None
    assert "dspark_force_budget_frac" in body["message"]


def test_newer_build_accepts_null_to_clear_the_pin(tmp_path: Path) -> None:
    table = ["--speculative-dspark-sps-table-path", write_table(tmp_path, NON_FLAT_TABLE)]
    with running_sim([*table, "--accept-null-pin"], env=compact_env(), time_scale=SCALE) as url:
        pinned = run_round(url, bs_per_rank=16, frac=0.25).aligned(16)[0]
        resp = set_pin(url, None)
        assert resp.status_code == 200 and resp.json() == [True]
        cleared = run_round(url, bs_per_rank=16).aligned(16)[0]
    assert {r["budget"] for r in pinned} == {28}
    assert "predicted_step_ms" not in pinned[0]
    # table-driven again: the flat dummy table's argmax takes every candidate
    assert {r["budget"] for r in cleared} == {16 * GAMMA}
    assert all("predicted_step_ms" in r for r in cleared)


def test_legacy_set_internal_state_shape() -> None:
    with running_sim(["--dp-size", "2", "--legacy-set-internal-state"], time_scale=SCALE) as url:
        body = set_pin(url, 0.5).json()
        assert [item["updated"] for item in body] == [True, True]
        assert [item["updated"] for item in set_pin(url, 0).json()] == [False, False]


def test_clear_info_records() -> None:
    with running_sim(["--dp-size", "2"], time_scale=SCALE) as url:
        generate(url, 4, 20)
        assert all(rank_records(url))
        resp = httpx.post(
            url + "/set_internal_state",
            json={"server_args": {"dspark_clear_info_records": True}},
            timeout=TIMEOUT,
        )
        assert resp.json() == [True, True]
        assert rank_records(url) == [[], []]


# ---------------------------------------------------------------- /generate, abort, flush


def test_generate_batch_response_shape() -> None:
    with running_sim(["--dp-size", "2"], time_scale=SCALE) as url:
        resp = generate(url, 3, 12, input_len=5)
        single = httpx.post(
            url + "/generate",
            json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4}},
            timeout=TIMEOUT,
        )
    assert resp.status_code == 200
    outs = resp.json()
    assert isinstance(outs, list) and len(outs) == 3
    for out in outs:
        assert len(out["output_ids"]) == 12
        meta = out["meta_info"]
        assert meta["finish_reason"] == {"type": "length", "length": 12}
        assert meta["prompt_tokens"] == 5 and meta["completion_tokens"] == 12
    assert len({o["meta_info"]["id"] for o in outs}) == 3
    assert isinstance(single.json(), dict)
    assert single.json()["meta_info"]["completion_tokens"] == 4


def _wait_for_rows(url: str, bs: int) -> int:
    for _ in range(2000):
        rows = rank_records(url)[0]
        if sum(1 for r in rows if r["bs"] == bs) >= 5:
            return max(r["forward_ct"] for r in rows)
    raise AssertionError("no decode steps at the target batch")


def test_abort_all_finishes_after_one_more_decode_step() -> None:
    from sim_contract_helpers import generate_in_background

    with running_sim(time_scale=1.0) as url:
        thread, out = generate_in_background(url, 6, 100_000)
        _wait_for_rows(url, 6)
        flush = httpx.post(url + "/flush_cache", timeout=TIMEOUT)
        assert flush.status_code == 400 and flush.text == "Flush cache failed.\n"
        abort = httpx.post(url + "/abort_request", json={"abort_all": True}, timeout=TIMEOUT)
        assert abort.status_code == 200 and abort.content == b""
        mark = max(r["forward_ct"] for r in rank_records(url)[0])
        thread.join(30)
        after = [r for r in rank_records(url)[0] if r["forward_ct"] > mark]
        flush = httpx.post(url + "/flush_cache", timeout=TIMEOUT)
        assert flush.status_code == 200 and flush.text.startswith("Cache flushed.")
    # At most the step in flight when the abort landed plus one more (exactly one more is
    # pinned down with a controlled clock in test_sim_engine), and never at a smaller bs.
    assert len(after) <= 2 and all(r["bs"] == 6 for r in after)
    outs = out[0].json()
    assert len(outs) == 6
    for o in outs:
        assert o["meta_info"]["finish_reason"] == {
            "type": "abort",
            "message": "Aborted",
            "status_code": None,
            "err_type": None,
        }
        assert o["meta_info"]["completion_tokens"] < 100_000


def test_abort_single_rid() -> None:
    from sim_contract_helpers import generate_in_background

    with running_sim(time_scale=20.0) as url:
        thread, out = generate_in_background(url, 1, 100_000)
        _wait_for_rows(url, 1)
        # rids are unknown to the client here; abort with an unknown rid changes nothing
        httpx.post(url + "/abort_request", json={"rid": "nope"}, timeout=TIMEOUT)
        assert thread.is_alive()
        httpx.post(url + "/abort_request", json={"abort_all": True}, timeout=TIMEOUT)
        thread.join(30)
    assert out[0].json()[0]["meta_info"]["finish_reason"]["type"] == "abort"


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("path", "body", "status", "shape"),
    [
        ("/generate", b"{bad json", 400, "validation"),
        ("/generate", b"[1, 2]", 400, "validation"),
        ("/generate", b'{"input_ids": "abc"}', 400, "validation"),
        ("/generate", b'{"input_ids": [[1, "x"]]}', 400, "validation"),
        ("/generate", b'{"stream": "yes", "input_ids": [1]}', 400, "validation"),
        ("/generate", b'{"sampling_params": {}}', 400, "error"),
        (
            "/generate",
            b'{"input_ids": [1], "sampling_params": {"max_new_tokens": -1}}',
            400,
            "error",
        ),
        ("/generate", b'{"input_ids": [1], "sampling_params": {"temperature": -1}}', 400, "error"),
        ("/set_internal_state", b"not json", 400, "validation"),
        ("/set_internal_state", b"{}", 400, "validation"),
        ("/set_internal_state", b'{"server_args": [1]}', 400, "validation"),
        ("/set_internal_state", b'{"server_args": {"x": [1]}}', 400, "validation"),
        ("/set_internal_state", b'{"server_args": {"x": "abc"}}', 400, "validation"),
        ("/abort_request", b"{", 400, "validation"),
        ("/abort_request", b'{"abort_all": "maybe"}', 400, "validation"),
    ],
)
def test_bad_input_gets_the_real_status_and_body(
    path: str, body: bytes, status: int, shape: str
) -> None:
    with running_sim(time_scale=SCALE) as url:
        resp = httpx.post(
            url + path, content=body, headers={"content-type": "application/json"}, timeout=TIMEOUT
        )
        assert httpx.get(url + "/health", timeout=TIMEOUT).status_code == 200
    assert resp.status_code == status
    data = resp.json()
    if shape == "validation":
        assert data["object"] == "error" and data["code"] == 400
        assert "validation error" in data["message"]
    else:
        assert set(data) == {"error"} and data["error"]["message"]


def test_flush_cache_rejects_negative_timeout() -> None:
    with running_sim(time_scale=SCALE) as url:
        bad = httpx.post(url + "/flush_cache?timeout=-1", timeout=TIMEOUT)
        ok = httpx.get(url + "/flush_cache?timeout=0", timeout=TIMEOUT)
        health = httpx.get(url + "/health_generate", timeout=TIMEOUT)
    assert bad.status_code == 400 and bad.json()["object"] == "error"
    assert ok.status_code == 200
    assert health.status_code == 200


# ---------------------------------------------------------------- simulator-only extras


def test_loaded_table_and_gpu_use_are_observable(tmp_path: Path) -> None:
    path = write_table(tmp_path, NON_FLAT_TABLE)
    args = ["--speculative-dspark-sps-table-path", path]
    with running_sim(args, env=compact_env(), time_scale=SCALE) as url:
        before = server_info(url)
        generate(url, 4, 20)
        httpx.post(
            url + "/set_internal_state",
            json={"server_args": {"dspark_clear_info_records": 1}},
            timeout=TIMEOUT,
        )
        after = server_info(url)
    assert before["sps_table"] == {
        "path": path,
        "loaded": True,
        "kind": "diagonal",
        "sha256": content_hash(NON_FLAT_TABLE),
        "uninitialized": False,
        "source": "path",
    }
    assert before["sim_stats"]["decode_steps"] == 0
    stats = after["sim_stats"]
    assert (stats["prefill_steps"], stats["decode_steps"]) == (1, 19)  # survives the clear
    assert stats["busy_model_seconds"] > 19 * 0.01
    with running_sim(time_scale=SCALE) as url:
        assert server_info(url)["sps_table"] is None


def test_client_disconnect_aborts_its_requests() -> None:
    with running_sim(time_scale=1.0) as url:
        with pytest.raises(httpx.TimeoutException):
            httpx.post(
                url + "/generate",
                json={"input_ids": [[1, 2, 3]] * 2, "sampling_params": {"max_new_tokens": 10**6}},
                timeout=0.5,
            )
        wait_for(
            "the requests of a disconnected client to be aborted (flush_cache succeeds)",
            lambda: httpx.post(url + "/flush_cache", timeout=TIMEOUT).status_code == 200,
            5,
            0.05,
        )


@pytest.mark.parametrize(
    ("flag", "legacy"),
    [("--disable-cuda-graph", True), ("--disable-decode-cuda-graph", False)],
)
def test_disabled_decode_graphs_run_eager_and_report_it(flag: str, legacy: bool) -> None:
    env = compact_env()
    with running_sim([flag, "--noise-cv", "0"], env=env, time_scale=SCALE) as eager_url:
        info = server_info(eager_url)
        eager = run_round(eager_url, bs_per_rank=16, frac=0.25).aligned(16)[0]
    with running_sim(
        ["--noise-cv", "0", "--verify-all-bug", "off"], env=env, time_scale=SCALE
    ) as url:
        graphed = run_round(url, bs_per_rank=16, frac=0.25).aligned(16)[0]
    assert info["disable_cuda_graph"] is legacy
    assert info["internal_states"][0]["cuda_graph_config"]["decode"]["backend"] == "disabled"
    # no graph tiers: the eager ragged forward runs exactly M tokens, plus launch overhead
    assert {r["num_verify_tokens"] for r in eager} == {44}
    assert {r["num_verify_tokens"] for r in graphed} == {48}
    eager_ms = statistics.median(r["step_cpu_ms"] for r in eager[10:])
    graphed_ms = statistics.median(r["step_cpu_ms"] for r in graphed[10:])
    assert eager_ms > graphed_ms * 1.2


def test_step_times_are_model_time_whatever_the_time_scale() -> None:
    # The e2e suite runs the simulator 40x faster than model time (SPS_SIM_TIME_SCALE=40):
    # the records still carry model milliseconds, so the profiler's and the operator's
    # physical floor on a step (api/limits.py MIN_STEP_SECONDS) holds there too.
    from sps_operator.api.limits import MIN_STEP_SECONDS
    from sps_sim.costmodel import DEFAULT_PRESET, PRESETS

    truth_ms = 1000 * PRESETS[DEFAULT_PRESET].decode_seconds(4, 4 * K)
    with running_sim(["--noise-cv", "0"], time_scale=SCALE) as url:
        rows = run_round(url, bs_per_rank=4).aligned(4)[0]
    ms = statistics.median(r["step_cpu_ms"] for r in rows[10:])
    assert ms == pytest.approx(truth_ms, rel=0.1)  # not truth / 400
    assert ms / 1000 > 20 * MIN_STEP_SECONDS
