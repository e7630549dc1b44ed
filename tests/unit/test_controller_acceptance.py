"""A run's rounds as a whole (`controller/policies/acceptance.py`): the sweep that was asked for,
every cell of it, each cell once."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from pydantic import ValidationError
from test_api_result import round_line
from test_tables_clockramp import ramp_rounds

from sps_operator.api.kinds import RunPhase, TableKind
from sps_operator.api.reasons import INCOMPLETE_SWEEP, SWEEP_MISMATCH
from sps_operator.api.result import validate_rounds
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.controller.kube import builders
from sps_operator.controller.policies.acceptance import asked_cells, judge
from sps_operator.profiler import cli as profiler_cli
from sps_operator.profiler.sweep import build_cells

GAMMA = 7


def spec(sweep: dict[str, Any], kind: str = "Diagonal") -> SpsProfileSpec:
    return SpsProfileSpec.model_validate(
        {"selector": {"matchLabels": {"app": "sglang"}}, "table": {"kind": kind, "sweep": sweep}}
    )


def diagonal_round(bs: int, repeat: int = 0, scale: float = 1.0) -> dict[str, Any]:
    sps = 1.0 / ((0.010 + 0.0001 * bs) * scale)
    return round_line(bs, bs * (GAMMA + 1), sps, repeat=repeat)


def additive_round(bs: int, frac: float, repeat: int = 0) -> dict[str, Any]:
    m = min(bs + int(frac * bs * GAMMA), bs * (GAMMA + 1))
    return round_line(bs, m, 1.0 / (0.010 + 0.0001 * bs + 0.00002 * m), frac, repeat)


BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]


def test_a_result_covering_2_of_24_asked_cells_is_refused_and_names_them() -> None:
    # Issue 18 #7: bs 1 and 2 of a 8 x 3 sweep became the live table (max_batch_tokens 16
    # for a server that runs 128 requests).
    asked = spec({"batchSizes": BATCHES, "repeats": 3})
    short = validate_rounds([diagonal_round(1), diagonal_round(2)])
    verdict = judge(short, asked, kind=TableKind.DIAGONAL, gate=False)
    assert verdict.reason == INCOMPLETE_SWEEP and not verdict.accepted
    assert "cover 2 of the 24 cells" in verdict.message
    assert "missing: repeat 0 bs 4, repeat 0 bs 8" in verdict.message
    assert "and 16 more" in verdict.message  # six named, the rest counted
    assert "--max-running-requests" in verdict.message  # why the profiler never drops one
    whole = validate_rounds([diagonal_round(bs, r) for r in range(3) for bs in BATCHES])
    assert judge(whole, asked, kind=TableKind.DIAGONAL, gate=False).accepted


def test_the_tapered_sweep_of_max_batch_size_is_the_one_to_cover() -> None:
    asked = spec({"maxBatchSize": 40})  # 1, 2, 4, 8, 16, 24, 32, 40
    tapered = [1, 2, 4, 8, 16, 24, 32, 40]
    rounds = validate_rounds([diagonal_round(bs) for bs in tapered])
    assert judge(rounds, asked, kind=TableKind.DIAGONAL, gate=False).accepted
    verdict = judge(rounds[:-1], asked, kind=TableKind.DIAGONAL, gate=False)
    assert verdict.reason == INCOMPLETE_SWEEP and "missing: repeat 0 bs 40." in verdict.message
    # A batch size below the maximum that the tapered sweep never measures was not asked.
    odd = validate_rounds([*(diagonal_round(bs) for bs in tapered), diagonal_round(3)])
    verdict = judge(odd, asked, kind=TableKind.DIAGONAL, gate=False)
    assert verdict.reason == SWEEP_MISMATCH and "batch size 3" in verdict.message


def test_an_additive_run_covers_both_phases() -> None:
    asked = spec({"batchSizes": [1, 2, 4]}, kind="Additive")  # default fracs: 4 of them
    fracs = (0.25, 0.5, 0.75, 1.0)
    phase1 = [diagonal_round(bs) for bs in (1, 2, 4)]
    phase2 = [additive_round(bs, f) for bs in (1, 2, 4) for f in fracs]
    assert judge(validate_rounds(phase1), asked, kind=TableKind.DIAGONAL, gate=False).accepted
    verdict = judge(validate_rounds(phase1 + phase2), asked, kind=TableKind.ADDITIVE, gate=False)
    assert verdict.accepted, verdict.message
    verdict = judge(
        validate_rounds(phase1 + phase2[:-1]), asked, kind=TableKind.ADDITIVE, gate=False
    )
    assert verdict.reason == INCOMPLETE_SWEEP
    assert "cover 14 of the 15 cells" in verdict.message and "bs 4 frac 1" in verdict.message


def test_copies_of_one_cell_cannot_outvote_the_real_repeats() -> None:
    # Issue 18 #8: bs 4 measured at 10.4 ms twice; three more copies of a round claiming
    # half of that would have made the cell's median 5.2 ms.
    asked = spec({"batchSizes": [1, 2, 4], "repeats": 2})
    honest = [diagonal_round(bs, r) for r in range(2) for bs in (1, 2, 4)]
    forged = dict(diagonal_round(4, 0, scale=0.5))
    rounds = validate_rounds(honest[:2] + [forged] * 4 + honest[3:])
    verdict = judge(rounds, asked, kind=TableKind.DIAGONAL, gate=False)
    assert verdict.reason == SWEEP_MISMATCH and not verdict.accepted
    assert "repeat 0 bs 4 4 times" in verdict.message


def test_a_stranded_round_and_its_remeasurement_are_not_duplicates() -> None:
    # A --resume after a run cut on its clock ramp: the first run's bs 2 and bs 4 cannot be
    # corrected (stranded); the resumed run measured bs 2 again, bs 4 and bs 8, then its
    # anchor bs 1. Every cell is covered once by a usable round.
    rounds = ramp_rounds()
    first = [dict(r, clock_run="first", clock_on_ramp=True) for r in rounds[:2]]
    resumed = [dict(r, clock_run="resumed") for r in rounds]
    asked = spec({"batchSizes": [1, 2, 4, 8]})
    verdict = judge(validate_rounds(first + resumed), asked, kind=TableKind.DIAGONAL, gate=False)
    assert verdict.accepted, verdict.message
    # Without the re-measurement of bs 2, that cell exists only stranded: missing, and why.
    verdict = judge(
        validate_rounds(first + resumed[1:]), asked, kind=TableKind.DIAGONAL, gate=False
    )
    assert verdict.reason == INCOMPLETE_SWEEP
    assert "missing: repeat 0 bs 2" in verdict.message
    assert "1 of them were measured only on a clock ramp" in verdict.message


sweeps = st.fixed_dictionaries(
    {"repeats": st.integers(1, 3)},
    optional={
        "batchSizes": st.lists(st.integers(1, 300), min_size=2, max_size=6).filter(
            lambda b: len(set(b)) >= 2
        ),
        "fracs": st.lists(st.sampled_from([0.1, 0.25, 1 / 3, 0.5, 1.0]), min_size=1, max_size=3),
    },
).flatmap(
    lambda s: (
        st.just(s)
        if "batchSizes" in s
        else st.one_of(st.just(s), st.integers(2, 600).map(lambda m: {**s, "maxBatchSize": m}))
    )
)


@given(sweep=sweeps, kind=st.sampled_from(["Diagonal", "Additive"]))
def test_the_cells_asked_for_are_the_cells_the_profiler_measures(
    sweep: dict[str, Any], kind: str
) -> None:
    """What the operator expects equals what sps-profiler measures given the Job's own
    command line (phase 1, and phase 2 for an Additive table)."""
    if kind == "Diagonal":
        sweep = {k: v for k, v in sweep.items() if k != "fracs"}
    try:
        profile = spec(sweep, kind)
    except ValidationError:  # a sweep the API refuses (too many cells)
        assume(False)
    measured: set[tuple[int, int, float | None]] = set()
    for phase in RunPhase if kind == "Additive" else (RunPhase.DIAGONAL,):
        args = profiler_cli.build_parser().parse_args(["run", *builders.sweep_argv(profile, phase)])
        cfg = profiler_cli._run_config(args)
        cells = build_cells(cfg.batch_sizes, cfg.fracs, cfg.repeats)
        if phase == RunPhase.DIAGONAL:
            assert {c.key for c in cells} == asked_cells(profile, kind=TableKind.DIAGONAL)
        measured |= {c.key for c in cells}
    assert measured == asked_cells(profile, kind=TableKind(kind))


@pytest.mark.parametrize("count", [2, 5])
def test_duplicates_are_named_with_their_count(count: int) -> None:
    asked = spec({"batchSizes": [1, 2]})
    rounds = validate_rounds([diagonal_round(1)] * count + [diagonal_round(2)])
    verdict = judge(rounds, asked, kind=TableKind.DIAGONAL, gate=False)
    assert f"repeat 0 bs 1 {count} times" in verdict.message
