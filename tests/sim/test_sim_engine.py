"""The pure engine under a controlled clock: exact step accounting, abort, tiers, rings."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from sps_operator import dspark_arith
from sps_sim.costmodel import PRESETS, without_effects
from sps_sim.engine import Engine, EngineConfig
from sps_sim.tableload import load_table_text

QUIET = replace(without_effects(PRESETS["NVIDIA-H100-80GB-HBM3"]), warmup_amplitude=0.10)
CAPTURE = tuple(dspark_arith.default_decode_capture_bs(256))
RECORDING = frozenset({"core", "step_cpu_time"})


def make(**kw: object) -> Engine:
    cfg = EngineConfig(capture_bs=CAPTURE, components=RECORDING, simulate_acc_len=1.0)
    return Engine(replace(cfg, **kw), QUIET)  # type: ignore[arg-type]


def run_to_idle(engine: Engine, start: float = 0.0) -> float:
    t = start
    while True:
        nxt = engine.next_event_time()
        if nxt is None:
            return t
        t = nxt
        engine.advance(t)


def test_forward_ct_counts_prefill_and_decode_and_tokens_are_one_per_step() -> None:
    engine = make()
    engine.submit([(None, 16, 10)] * 3, 0.0)
    run_to_idle(engine)
    done = engine.drain_finished()
    assert [len(r.output_ids) for r in done] == [10, 10, 10]
    rows = engine.records(0)
    # prefill (ct 1) gives the first token, then 9 decode steps (ct 2..10)
    assert [r["forward_ct"] for r in rows] == list(range(2, 11))
    assert "step_cpu_ms" not in rows[0]
    assert all("step_cpu_ms" in r for r in rows[1:])


def test_step_cpu_ms_is_the_model_step_time() -> None:
    engine = make()
    engine.submit([(None, 16, 6)] * 4, 0.0)
    run_to_idle(engine)
    rows = engine.records(0)
    padded = dspark_arith.round_up(engine.runner_bs, 4)
    assert padded == 4
    base = QUIET.decode_seconds(4, 4 * 8) * 1000
    for row in rows[1:]:
        # only the warm-up factor separates it from the noise-free truth
        assert base <= row["step_cpu_ms"] <= base * (1 + QUIET.warmup_amplitude) + 1e-3


def test_abort_runs_exactly_one_more_decode_step_at_the_old_bs() -> None:
    engine = make()
    engine.submit([(None, 16, 10_000)] * 5, 0.0)
    t = 0.0
    for _ in range(20):
        t = engine.next_event_time() or t
        engine.advance(t)
    in_flight_end = engine.next_event_time()
    assert in_flight_end is not None
    before = len(engine.records(0))
    engine.abort(t + 1e-6, abort_all=True)  # lands while the next step is in flight
    run_to_idle(engine, t)
    rows = engine.records(0)[before:]
    assert [r["bs"] for r in rows] == [5, 5]  # the in-flight step + exactly one more
    done = engine.drain_finished()
    assert {r.finish_reason["type"] for r in done if r.finish_reason} == {"abort"}
    assert not engine.pending_work()


def test_abort_of_waiting_requests_finishes_them_at_once() -> None:
    engine = make(max_running_per_dp=2)
    engine.submit([(None, 16, 10_000)] * 4, 0.0)
    engine.advance(0.5)
    engine.abort(0.5, abort_all=True)
    waiting_done = engine.drain_finished()
    assert len(waiting_done) == 2
    assert all(
        r.finish_reason
        == {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
        for r in waiting_done
    )


def test_flush_cache_fails_while_requests_are_pending() -> None:
    engine = make()
    engine.submit([(None, 8, 50)], 0.0)
    assert engine.flush_cache(0.0) is False
    run_to_idle(engine)
    assert engine.flush_cache(100.0) is True


@pytest.mark.parametrize(("frac", "expected_tier"), [(0.25, 48), (0.5, 80), (1.0, 128)])
def test_compact_pinned_tier_matches_contract_example(frac: float, expected_tier: int) -> None:
    # contract §4.2: K=8, bs=16: 0.25 -> M=44 -> 48; 0.5 -> M=72 -> 80; 1.0 -> 128
    engine = make(mode="compact", verify_all_bug=False)
    engine.set_internal_state({"dspark_force_budget_frac": frac}, 0.0)
    engine.submit([(None, 16, 8)] * 16, 0.0)
    run_to_idle(engine)
    rows = engine.records(0)
    assert rows[0]["num_verify_tokens"] == 128 and "budget" not in rows[0]
    assert {r["num_verify_tokens"] for r in rows[1:]} == {expected_tier}


def test_bs_one_pin_cannot_shrink_the_graph() -> None:
    engine = make(mode="compact", verify_all_bug=False)
    engine.set_internal_state({"dspark_force_budget_frac": 0.1}, 0.0)
    engine.submit([(None, 16, 8)], 0.0)
    run_to_idle(engine)
    assert {r["num_verify_tokens"] for r in engine.records(0)} == {8}


def test_bug_switch_and_table_decide_the_shortcut() -> None:
    flat = load_table_text(
        '{"sample_batch_tokens":[1],"sample_steps_per_sec":[1.0],"max_batch_tokens":9}'
    )
    two = load_table_text(
        '{"sample_batch_tokens":[1,2],"sample_steps_per_sec":[1.0,1.0],"max_batch_tokens":2}'
    )
    assert make(mode="compact").config.is_verify_all
    assert make(mode="compact", table=flat).config.is_verify_all
    assert not make(mode="compact", table=two).config.is_verify_all
    assert not make(mode="static").config.is_verify_all
    for table, bug, expected in (
        (None, True, 128),
        (flat, True, 128),
        (two, True, 48),
        (None, False, 48),
    ):
        engine = make(mode="compact", table=table, verify_all_bug=bug)
        engine.set_internal_state({"dspark_force_budget_frac": 0.25}, 0.0)
        engine.submit([(None, 16, 6)] * 16, 0.0)
        run_to_idle(engine)
        assert {r["num_verify_tokens"] for r in engine.records(0)[1:]} == {expected}


def test_runner_adds_the_pool_and_drops_larger_graphs() -> None:
    assert dspark_arith.runner_capture_bs([1, 2, 4, 8, 64], 48) == [1, 2, 4, 8, 48]
    assert dspark_arith.runner_capture_bs([1, 2, 4], 48) == [1, 2, 4]
    engine = make(mode="compact", max_running_per_dp=48, verify_all_bug=False)
    assert engine.tiers[-1] == 48 * 8
    assert 56 * 8 not in engine.tiers


def test_forced_budget_order_of_operations() -> None:
    assert dspark_arith.forced_budget(0.3, 6, 15) == 27
    assert int(0.3 * 6 * 15) == 26  # the reference profiler's order differs
    assert dspark_arith.verify_tokens_for_budget(16, 200, 8) == 128


def test_ring_eviction_keeps_newest() -> None:
    engine = make(ring_size=3)
    engine.submit([(None, 8, 10)], 0.0)
    run_to_idle(engine)
    assert [r["forward_ct"] for r in engine.records(0)] == [8, 9, 10]
    assert json.loads(engine.records_json(0))[0]["forward_ct"] == 8


def test_set_internal_state_validation_is_all_or_nothing() -> None:
    engine = make(dp_size=2)
    assert engine.set_internal_state({"dspark_force_budget_frac": 0.5}, 0.0) == [True, True]
    assert engine.set_internal_state({"dspark_force_budget_frac": 0.7, "x": 1}, 0.0) == [
        False,
        False,
    ]
    assert [r.pin for r in engine.ranks] == [0.5, 0.5]
    assert engine.set_internal_state({"dspark_force_budget_frac": 0}, 0.0) == [False, False]
    plain = make(dspark=False)
    assert plain.set_internal_state({"dspark_force_budget_frac": 0.5}, 0.0) == [False]
    assert plain.set_internal_state({"dspark_clear_info_records": 1}, 0.0) == [False]


def test_warm_up_drift_after_idle() -> None:
    engine = make(ring_size=10_000)
    engine.submit([(None, 8, 400)], 0.0)
    t = run_to_idle(engine)
    first = engine.records(0)
    engine.submit([(None, 8, 400)], t + 0.01)  # no idle gap worth a clock drop
    t2 = run_to_idle(engine, t + 0.01)
    hot = engine.records(0)[len(first) :]
    engine.submit([(None, 8, 400)], t2 + 30.0)  # long idle: clocks ramp again
    run_to_idle(engine, t2 + 30.0)
    cold = engine.records(0)[len(first) + len(hot) :]
    assert cold[1]["step_cpu_ms"] > hot[1]["step_cpu_ms"] * 1.05
    assert abs(cold[-1]["step_cpu_ms"] / hot[-1]["step_cpu_ms"] - 1) < 0.01


def test_simulated_acceptance_length() -> None:
    engine = make(simulate_acc_len=2.5, mode="static")
    engine.submit([(None, 8, 101)], 0.0)
    run_to_idle(engine)
    req = engine.drain_finished()[0]
    assert len(req.output_ids) == 101
    assert req.verify_steps == 40  # 1 prefill token + 100 tokens at 2.5 per step


def test_dp_attention_idle_rank_still_counts_forward_ct() -> None:
    engine = make(dp_size=2, dp_attention=True)
    engine.submit([(None, 8, 5)], 0.0)  # only rank 0 gets work
    run_to_idle(engine)
    assert engine.ranks[0].forward_ct == engine.ranks[1].forward_ct == 5
    assert engine.records(1) == []


def test_multinomial_acceptance_varies_within_bounds() -> None:
    engine = make(simulate_acc_len=2.0, simulate_acc_method="multinomial", mode="static")
    engine.submit([(None, 8, 2001)], 0.0)
    run_to_idle(engine)
    req = engine.drain_finished()[0]
    per_step = 2000 / req.verify_steps
    assert 1.5 < per_step < 2.5  # N(2, 1) rounded and clamped to [1, K]


def test_max_new_tokens_zero_finishes_on_prefill() -> None:
    engine = make()
    engine.submit([(None, 8, 0)], 0.0)
    run_to_idle(engine)
    req = engine.drain_finished()[0]
    assert req.output_ids == [] and req.finish_reason == {"type": "length", "length": 0}
    assert engine.records(0) == []
