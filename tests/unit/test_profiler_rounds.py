"""Round post-processing: alignment, pin checks (contract §9), stopping rule."""

from __future__ import annotations

import dataclasses
import random

import pytest
from test_profiler_steady import ar1_series

from sps_operator.dspark_arith import compact_tiers, runner_capture_bs
from sps_operator.profiler.active_round import RingWatch
from sps_operator.profiler.rounds import (
    PinExpectation,
    PinNotTakenError,
    RoundError,
    SteadySeries,
    StepRow,
    StoppingRule,
    check_pin,
    live_progress,
    postprocess_round,
    rows_from_payload,
    steady_part,
)
from sps_operator.profiler.steady import TAIL_STEPS
from sps_operator.profiler.stopping import (
    drift_after_an_early_stop,
    round_finished,
    stopped_on_effective_steps,
)

K = 8
GAMMA = 7
TIERS = compact_tiers(
    runner_capture_bs([*range(1, 9), *range(10, 33, 2), *range(40, 65, 4)], 48), K
)
RULE = StoppingRule(ci_rel_width=0.02, min_steps=24, prompt_len=250, reference_context=300)


def rows(
    n: int,
    bs: int,
    tokens: int,
    *,
    t: float = 0.01,
    first_ct: int = 0,
    budget: int | None = None,
    local: int | None = None,
    noise: float = 0.0,
    seed: int = 0,
) -> list[StepRow]:
    rng = random.Random(seed)
    return [
        StepRow(
            forward_ct=first_ct + i,
            num_running_reqs=bs,
            num_verify_tokens=tokens,
            step_time=t * (1 + rng.gauss(0, noise)),
            budget=budget,
            verify_tokens_local=local,
        )
        for i in range(n)
    ]


def process(
    rank_rows: list[list[StepRow]],
    bs: int,
    frac: float | None = None,
    dp: int = 1,
    clock_start: float | None = None,
    carried: SteadySeries | None = None,
):
    return postprocess_round(
        rank_rows,
        repeat=0,
        bs=bs,
        dp_size=dp,
        gamma=GAMMA,
        mode="compact" if frac is not None else "static",
        tiers=TIERS,
        frac=frac,
        rule=RULE,
        load_info={},
        clock_start=clock_start,
        carried=carried,
    )


def test_diagonal_round_measures_median_after_warmup() -> None:
    data = rows(8, 4, 32, t=0.05) + rows(60, 4, 32, t=0.01, first_ct=8)
    outcome = process([data], bs=4)
    summary = outcome.to_summary()
    assert summary["batch_tokens"] == 32
    assert summary["steps_per_sec"] == pytest.approx(100.0)
    assert summary["ci_met"] is True
    assert summary["num_steady_steps"] == 60
    assert summary["frac"] is None
    assert summary["graph_tiers"] == TIERS  # static: the capture list's tiers, for the fit


def test_a_round_of_steps_recorded_in_seconds_fails() -> None:
    # Issue 18 #8: step_cpu_ms 0.0105 is a 10.5 ms step written in seconds (10.5 µs).
    data = rows(70, 4, 32, t=0.0105e-3, noise=0.01)
    with pytest.raises(RoundError, match=r"0\.01\d* ms, below the 0\.1 ms") as info:
        process([data], bs=4)
    assert "not in milliseconds (seconds?)" in str(info.value)
    assert process([rows(70, 4, 32, t=0.2e-3)], bs=4).stats.median == pytest.approx(0.2e-3)


def test_a_round_places_its_window_on_the_run_clock() -> None:
    # 8 warm-up steps of 50 ms then 60 of 10 ms, the round starting at clock 100 s: the
    # window's first step starts after the warm-up's 0.4 s, its last 59 steps later.
    data = rows(8, 4, 32, t=0.05) + rows(60, 4, 32, t=0.01, first_ct=8)
    outcome = process([data], bs=4, clock_start=100.0)
    start, end = outcome.to_summary()["clock_s"]
    assert start == pytest.approx(100.4)
    assert end == pytest.approx(100.4 + 59 * 0.01)
    assert "clock_s" not in process([data], bs=4).to_summary()  # no clock kept: no field
    part = steady_part([data], bs=4, prompt_len=250, pinned=False, clock_start=5.0)
    assert len(part.times) == len(part.clocks) == len(part.contexts) == 60
    assert part.clocks[0] == pytest.approx(5.4) and part.clocks[1] == pytest.approx(5.41)


def test_dp_ranks_are_averaged_and_off_target_steps_dropped() -> None:
    rank0 = rows(40, 2, 16, t=0.010)
    rank1 = rows(40, 2, 16, t=0.012)
    rank1[20] = StepRow(20, 1, 8, 0.5)  # one off-target step on one rank
    outcome = process([rank0, rank1], bs=2, dp=2)
    assert outcome.stats.median == pytest.approx(0.011)
    assert outcome.per_rank_median_step_time == pytest.approx([0.010, 0.012])
    assert outcome.to_summary()["batch_size"] == 4


@pytest.mark.parametrize(
    ("rank_rows", "message"),
    [
        ([rows(40, 4, 32)], "expected records from 2 DP ranks"),
        ([rows(40, 4, 32), []], "DP rank 1 produced no new decode-step records"),
        ([rows(40, 4, 32), rows(40, 4, 32, first_ct=100)], "share no common forward_ct"),
        ([rows(20, 4, 32), rows(20, 4, 32)], "never stabilized"),
    ],
)
def test_round_errors(rank_rows: list[list[StepRow]], message: str) -> None:
    with pytest.raises(RoundError, match=message):
        process(rank_rows, bs=4, dp=2)


def test_rank_that_never_reaches_target_batch_is_reported() -> None:
    with pytest.raises(RoundError, match=r"never stabilized.*ranks ran batches \[3, 4\]"):
        process([rows(60, 4, 32), rows(60, 3, 24)], bs=4, dp=2)


def test_unstable_mid_round() -> None:
    # Only every third step runs at the target batch: retraction, not ramp-in.
    data = [StepRow(i, 4 if i % 3 == 0 else 3, 32, 0.01) for i in range(200)]
    with pytest.raises(RoundError, match="unstable mid-round: only 34%"):
        process([data], bs=4)


def test_diagonal_rejects_trimmed_verify() -> None:
    with pytest.raises(RoundError, match=r"num_verify_tokens \[24\] < 4x8"):
        process([rows(60, 4, 24)], bs=4)


def test_pinned_round_on_fixed_server_uses_server_m() -> None:
    # bs=16, frac=0.25: budget int(0.25*112)=28, M=44, tier 48 (contract §2 example).
    data = rows(60, 16, 48, budget=28, local=44)
    outcome = process([data], bs=16, frac=0.25)
    summary = outcome.to_summary()
    assert summary["batch_tokens"] == 44
    assert summary["graph_tier"] == 48
    assert summary["expected_tier"] == 48
    assert summary["budget"] == 28
    assert summary["graph_tiers"] == TIERS


def test_server_order_of_operations_for_m() -> None:
    # frac=0.3, bs=6, gamma=15: server int(0.3*90)=27; the reference's int(0.3*6*15)=26.
    expect = PinExpectation(frac=0.3, bs=6, gamma=15, mode="compact", tiers=(16 * 6,))
    assert expect.budget == 27
    assert int(0.3 * 6 * 15) == 26


def test_verify_all_shortcut_is_detected() -> None:
    # The bug: budget/local show the pin, but every step replays the full-width tier.
    data = rows(60, 16, 128, budget=28, local=44)
    with pytest.raises(PinNotTakenError, match="verify-all shortcut") as excinfo:
        process([data], bs=16, frac=0.25)
    assert "non-flat table" in str(excinfo.value)
    assert "M=44 should replay the 48-token graph" in str(excinfo.value)


def test_pin_checks_budget_and_local_fields() -> None:
    expect = PinExpectation(frac=0.25, bs=16, gamma=GAMMA, mode="compact", tiers=tuple(TIERS))
    with pytest.raises(PinNotTakenError, match=r"budget \[56\], expected 28"):
        check_pin(rows(10, 16, 48, budget=56, local=44), expect, "r")
    with pytest.raises(PinNotTakenError, match=r"verify_tokens_local \[72\], expected M=44"):
        check_pin(rows(10, 16, 48, budget=28, local=72), expect, "r")
    with pytest.raises(PinNotTakenError, match="no steady step carries a `budget`"):
        check_pin(rows(10, 16, 48), expect, "r")
    with pytest.raises(PinNotTakenError, match="fewer than the pinned M=44"):
        check_pin(rows(10, 16, 40, budget=28, local=44), expect, "r")
    mixed = rows(5, 16, 48, budget=28) + rows(5, 16, 64, budget=28, first_ct=5)
    with pytest.raises(RoundError, match="differing num_verify_tokens"):
        check_pin(mixed, expect, "r")
    # Unexpected but smaller-than-full tier: only a warning (capture list may differ).
    warnings = check_pin(rows(10, 16, 64, budget=28, local=44), expect, "r")
    assert warnings and "expected tier 48" in warnings[0]


def test_pin_at_bs1_cannot_shrink_and_is_not_flagged() -> None:
    # bs=1: every frac replays tier 8 = full width, which is correct, not the bug.
    data = rows(60, 1, 8, budget=1, local=2)
    outcome = process([data], bs=1, frac=0.25)
    assert outcome.batch_tokens == 2


def test_steps_without_budget_after_warmup_are_not_measured() -> None:
    # Relay not resolved yet: full-width, no budget; they must not pollute the pinned cell.
    data = rows(12, 16, 128, t=0.02) + rows(60, 16, 48, budget=28, local=44, first_ct=12)
    outcome = process([data], bs=16, frac=0.25)
    assert outcome.stats.median == pytest.approx(0.01)
    assert outcome.graph_tier == 48


def test_cap_accept_expects_m_itself() -> None:
    data = rows(60, 16, 44, budget=28, local=44)
    outcome = postprocess_round(
        [data],
        repeat=0,
        bs=16,
        dp_size=1,
        gamma=GAMMA,
        mode="cap-accept",
        tiers=TIERS,
        frac=0.25,
        rule=RULE,
        load_info={},
    )
    assert outcome.batch_tokens == 44
    assert outcome.graph_tiers is None


def test_live_progress_ignores_unpinned_steps() -> None:
    data = rows(40, 16, 128) + rows(30, 16, 48, budget=28, first_ct=40)
    aligned, stats, times = live_progress([data], bs=16, rule=RULE, pinned=True)
    assert aligned == 70
    assert stats is not None and stats.num_steps == 30
    assert len(times) == 30


def test_rows_from_payload() -> None:
    payload = {
        "records": [
            {"forward_ct": 1, "bs": 2, "num_running_reqs": 2, "num_verify_tokens": 16},
            {"forward_ct": 2, "num_running_reqs": 2, "num_verify_tokens": 16, "step_cpu_ms": 12.5},
            {
                "forward_ct": 3,
                "num_running_reqs": 2,
                "num_verify_tokens": 8,
                "step_cpu_ms": 10,
                "budget": 3,
                "verify_tokens_local": 5,
            },
        ]
    }
    parsed = rows_from_payload(payload, 0)
    assert [r.forward_ct for r in parsed] == [2, 3]  # no step_cpu_ms → skipped
    assert parsed[0].step_time == pytest.approx(0.0125)
    assert parsed[1].budget == 3 and parsed[1].verify_tokens_local == 5
    with pytest.raises(RoundError, match="stopped reporting"):
        rows_from_payload(None, 1)
    with pytest.raises(RoundError, match="malformed record"):
        rows_from_payload({"records": [{"step_cpu_ms": 1}]}, 0)


def test_a_pin_probe_stops_once_the_pin_is_seen_not_at_a_ci() -> None:
    # 10 % noise: a measuring round runs to its step budget (the CI is not met), a probe —
    # whose step time is thrown away — stops as soon as it has its few pinned steps.
    rng = random.Random(3)
    times = [0.01 * rng.lognormvariate(0, 0.1) for _ in range(24)]
    contexts = [300.0 + i for i in range(24)]
    stats = RULE.judge(times, contexts)
    assert stats is not None and not stats.done
    assert not round_finished("measure", RULE, stats, times, step_budget=240)
    assert round_finished("probe", RULE, stats, times, step_budget=240)
    # Before the rule's minimum of steps there is nothing to stop on, for either.
    assert not round_finished("probe", RULE, None, times[:5], step_budget=240)
    assert not round_finished("measure", RULE, None, times[:5], step_budget=240)
    # The budget ends a measuring round; too few steps to judge the clocks keep warming.
    assert round_finished("measure", RULE, stats, times, step_budget=24)
    assert not round_finished("settle", RULE, stats, times, step_budget=240)
    assert round_finished("settle", RULE, stats, times, step_budget=24)


def test_the_warm_up_judges_the_clocks_over_all_its_rounds() -> None:
    # The warm-up runs the first cell's round again until the clocks settle: the settling
    # test reads the earlier rounds' steps and this one's as one series.
    rng = random.Random(4)
    flat = [0.0125 * rng.lognormvariate(0, 0.03) for _ in range(400)]  # 5 s of quiet clocks
    earlier, now = flat[:300], flat[300:]
    assert not round_finished("settle", RULE, None, now, step_budget=3000)
    assert round_finished("settle", RULE, None, now, step_budget=3000, history=earlier)
    # The warm-up's step cap counts every round's steps.
    assert round_finished("settle", RULE, None, now[:10], step_budget=300, history=earlier)


def _ring_rows(first: int, last: int) -> list[StepRow]:
    return [StepRow(ct, 1, 1, 0.01) for ct in range(first, last + 1)]


def test_a_ring_that_filled_between_two_polls_is_named_too_small() -> None:
    # A slow poller (a loaded host) sees 30 records, then the ring's 40 whose oldest are
    # gone: the count grew, so only the lost first record tells the eviction.
    watch = RingWatch("round bs=1", round_steps=300)
    watch.check([_ring_rows(1, 30)])
    with pytest.raises(RoundError, match="ring too small"):
        watch.check([_ring_rows(261, 300)])


def test_a_ring_that_keeps_every_record_is_not_too_small() -> None:
    watch = RingWatch("round bs=1", round_steps=300)
    for last in (30, 40, 300):
        watch.check([_ring_rows(1, last)])
    watch.check([_ring_rows(1, 300)])  # no new step: nothing evicted either


def test_a_ring_full_while_steps_go_on_is_too_small() -> None:
    watch = RingWatch("round bs=1", round_steps=300)
    watch.check([_ring_rows(1, 40)])
    with pytest.raises(RoundError, match="ring too small"):
        watch.check([_ring_rows(11, 50)])


def test_a_carried_warm_up_round_counts_in_the_measurement() -> None:
    # The previous warm-up round's 60 steady steps (same prompts: same contexts) at 10 ms,
    # then this round's 60: one window of 120, its clocks from the carried steps' first.
    data = rows(8, 4, 32, t=0.05) + rows(60, 4, 32, t=0.01, first_ct=8, noise=0.02, seed=3)
    previous = steady_part(
        [rows(8, 4, 32, t=0.05) + rows(60, 4, 32, t=0.01, noise=0.02, seed=4, first_ct=8)],
        bs=4,
        prompt_len=RULE.prompt_len,
        pinned=False,
        clock_start=1.0,
    )
    alone = process([data], bs=4, clock_start=3.0).to_summary()
    summary = process([data], bs=4, clock_start=3.0, carried=previous).to_summary()
    assert alone["num_steady_steps"] == 60 and "carried_warmup_steps" not in alone
    assert summary["num_steady_steps"] == 120
    assert summary["carried_warmup_steps"] == 60
    assert summary["clock_s"][0] == pytest.approx(previous.clocks[0])
    assert summary["ci_rel_width"] < alone["ci_rel_width"]
    assert summary["median_step_time"] == pytest.approx(0.01, rel=0.02)


def test_a_series_is_cut_by_index_and_by_run_clock() -> None:
    series = SteadySeries([0.01, 0.02, 0.03], [10.0, 11.0, 12.0], [5.0, 5.01, 5.03])
    assert series.from_index(-4) == series
    assert series.from_index(1) == SteadySeries([0.02, 0.03], [11.0, 12.0], [5.01, 5.03])
    assert series.from_index(3) is None
    assert series.from_clock(5.005) == SteadySeries([0.02, 0.03], [11.0, 12.0], [5.01, 5.03])
    assert series.from_clock(5.0) == series
    assert series.from_clock(5.04) is None


def test_a_noisy_round_stops_at_its_effective_steps_and_a_correlated_one_at_the_cap() -> None:
    # 10 % noise: no round meets the 2 % CI. Uncorrelated steps reach 110 effective steps
    # long before the 240-step cap; steps correlated at 0.8 hold far fewer per step, and
    # the step cap ends them first.
    contexts = [300.0 + i for i in range(240)]
    white = [0.01 * t for t in ar1_series(240, cv=0.1, phi=0.0, seed=5)]
    correlated = [0.01 * t for t in ar1_series(240, cv=0.1, phi=0.8, seed=5)]

    def first_stop(times: list[float]) -> int:
        for n in range(RULE.min_steps, len(times) + 1):
            stats = RULE.judge(times[:n], contexts[:n])
            assert stats is not None and not stats.done
            if round_finished(
                "measure", RULE, stats, times[:n], step_budget=240, effective_budget=110.0
            ):
                return n
        raise AssertionError("never stopped")

    assert 110 <= first_stop(white) <= 150
    assert first_stop(correlated) == 240
    # Without the effective budget (`--max-effective-steps 0`) only the step cap stops it.
    stats = RULE.judge(white[:200], contexts[:200])
    assert stats is not None
    assert not round_finished("measure", RULE, stats, white[:200], step_budget=240)


def first_effective_stop(times: list[float], contexts: list[float]) -> int | None:
    """The first step count at which a measuring round of `times` may stop, before 240."""
    for n in range(RULE.min_steps, 240):
        stats = RULE.judge(times[:n], contexts[:n])
        if round_finished(
            "measure", RULE, stats, times[:n], step_budget=240, effective_budget=110.0
        ):
            return n
    return None


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_the_effective_steps_stop_waits_while_the_last_steps_read_capped(seed: int) -> None:
    # 10 % noise: the round would stop on its effective steps. A clock cap (+30 %) that set
    # in `TAIL_STEPS` steps before that point: the last steps read slower, so it does not
    # stop there (it runs on, where the rise shows, or to its step cap).
    contexts = [300.0 + i for i in range(300)]
    white = [0.01 * t for t in ar1_series(300, cv=0.1, phi=0.0, seed=seed)]
    stop = first_effective_stop(white, contexts)
    assert stop is not None
    at_stop = RULE.judge(white[:stop], contexts[:stop])
    assert at_stop is not None
    assert stopped_on_effective_steps(RULE, at_stop, white[:stop], 240, 110.0)
    capped = [t * (1.3 if i >= stop - TAIL_STEPS else 1.0) for i, t in enumerate(white)]
    stats = RULE.judge(capped[:stop], contexts[:stop])
    assert stats is not None
    assert not stopped_on_effective_steps(RULE, stats, capped[:stop], 240, 110.0)
    # Not a stop on its effective steps: at its step budget, or below its effective one.
    assert not stopped_on_effective_steps(RULE, at_stop, white[:stop], stop, 110.0)
    assert not stopped_on_effective_steps(RULE, at_stop, white[:stop], 240, 1e9)


def test_a_round_stopped_early_is_measured_again_when_its_last_records_read_capped() -> None:
    # What `ActiveRound.measure` acts on for a round that stopped on its effective steps:
    # the records read at its end show a cap that set in as it stopped, as slower last
    # steps (`tail_rise`) or as a window the KV line no longer explains.
    outcome = process([rows(8, 4, 32, t=0.05) + rows(120, 4, 32, first_ct=8, noise=0.1)], bs=4)
    assert outcome.tail_rise is None and not outcome.stats.window.drifting
    assert drift_after_an_early_stop(outcome) is None
    assert drift_after_an_early_stop(dataclasses.replace(outcome, tail_rise=0.2)) == 0.2
    window = dataclasses.replace(outcome.stats.window, drifting=True, drift_rel=0.159)
    drifting = dataclasses.replace(outcome, stats=dataclasses.replace(outcome.stats, window=window))
    assert drift_after_an_early_stop(drifting) == pytest.approx(0.159)
    # From the records themselves: the last `TAIL_STEPS` steps read 25 % slower.
    capped = rows(8, 4, 32, t=0.05) + [
        dataclasses.replace(r, step_time=r.step_time * (1.25 if i >= 120 - TAIL_STEPS else 1.0))
        for i, r in enumerate(rows(120, 4, 32, first_ct=8, noise=0.1))
    ]
    late = drift_after_an_early_stop(process([capped], bs=4))
    assert late is not None and late > 0.1
