"""The order of a run's rounds: the pin probe, the warm-up on the first cell, the cells."""

from __future__ import annotations

import pytest

from sps_operator.profiler.sweep import SweepCell, after_warmup_round, build_jobs

CELLS = [SweepCell(0, bs, None) for bs in (1, 2, 4)]
PROBE = SweepCell(-1, 2, 0.25)


def test_the_warm_up_runs_on_the_first_cell_after_the_probe() -> None:
    jobs = build_jobs(CELLS, warmup=True, probe=PROBE)
    assert jobs == [
        ("pre-flight", PROBE),
        ("warm-up", CELLS[0]),
        ("cell", CELLS[0]),
        ("cell", CELLS[1]),
        ("cell", CELLS[2]),
    ]
    assert build_jobs(CELLS, warmup=False, probe=None) == [("cell", c) for c in CELLS]
    assert build_jobs([], warmup=True, probe=PROBE) == []


def test_a_settled_warm_up_stands_for_its_cell() -> None:
    # The warm-up's load is the first cell's round: once the clocks have settled it goes
    # on as that cell's measurement, and the cell is not measured again.
    jobs = build_jobs(CELLS, warmup=True, probe=PROBE)
    after = after_warmup_round(jobs, 1, settled=True)
    assert after == [("pre-flight", PROBE), ("warm-up", CELLS[0])] + [
        ("cell", c) for c in CELLS[1:]
    ]


def test_a_warm_up_not_settled_when_its_requests_end_is_followed_by_another() -> None:
    jobs = build_jobs(CELLS, warmup=True, probe=None)
    after = after_warmup_round(jobs, 0, settled=False)
    assert after[:3] == [("warm-up", CELLS[0]), ("warm-up", CELLS[0]), ("cell", CELLS[0])]
    assert after_warmup_round(after, 1, settled=True) == [
        ("warm-up", CELLS[0]),
        ("warm-up", CELLS[0]),
        *[("cell", c) for c in CELLS[1:]],
    ]
    with pytest.raises(ValueError):
        after_warmup_round(jobs, 1, settled=True)


def test_a_warm_up_on_a_modelled_ramp_moves_its_cell_to_the_end_as_the_anchor() -> None:
    # The sweep starts on the ramp; the warm-up's cell is measured again on warm clocks,
    # last, with the warm-up's own prompts (the ramp model's anchor).
    jobs = build_jobs(CELLS, warmup=True, probe=PROBE)
    after = after_warmup_round(jobs, 1, settled=False, probed=True)
    assert after == [
        ("pre-flight", PROBE),
        ("warm-up", CELLS[0]),
        ("cell", CELLS[1]),
        ("cell", CELLS[2]),
        ("anchor", CELLS[0]),
    ]


def test_a_cell_whose_round_rose_is_measured_again_two_rounds_later_before_the_anchor() -> None:
    # Issue 37: measured again right after the next round, the cell often lay inside the
    # same cap (5 s, two rounds); two rounds later it is past it. The anchor stays last.
    from sps_operator.profiler.runner import _rise_remeasure_at
    from sps_operator.profiler.sweep import Job, SweepCell

    cells = [("cell", SweepCell(0, bs, None)) for bs in (2, 4, 8, 16)]
    anchor: list[Job] = [("anchor", SweepCell(0, 1, None))]
    queue: list[Job] = [*cells, *anchor]
    assert _rise_remeasure_at(queue, 0) == 3  # after bs 4 and bs 8
    assert _rise_remeasure_at(queue, 2) == 4  # only bs 16 is left before the anchor
    assert _rise_remeasure_at(queue, 3) == 5  # the round already started (the anchor) first
    assert _rise_remeasure_at(queue, 4) == 6  # the anchor itself: at the end
    assert _rise_remeasure_at(cells, 3) == 5
