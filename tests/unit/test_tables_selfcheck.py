"""The checks a table passes before it may go onto a server (`tables/selfcheck.py`), and
the one place the physical range of a decode step lives (`api/limits.py`)."""

from __future__ import annotations

import pytest

from sps_operator.api.limits import MAX_STEP_SECONDS, MIN_STEP_SECONDS
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable
from sps_operator.tables.selfcheck import self_check, step_range_problems
from sps_sim.costmodel import PRESETS, CostPreset


def test_a_table_of_steps_reported_in_seconds_is_not_a_gpu() -> None:
    # Issue 18 #8: step_cpu_ms of 0.0105 (a 10.5 ms step written in seconds): 95,000
    # steps/s passed the fit as a table.
    table = SpsCostTable([8, 16], [95_000.0, 90_000.0], 16)
    problems = self_check(table)
    assert len(problems) == 2 and "0.0105263 ms per step" in problems[0]
    assert "plausible 0.1–1000 ms" in problems[0]
    assert self_check(SpsCostTable([8, 16], [95.0, 90.0], 16)) == []


def test_an_additive_table_is_bounded_over_its_whole_domain() -> None:
    fast = SpsAdditiveCostTable(5e-5, [1, 8], [0.0, 1e-5], [0, 64], [0.0, 2e-5])
    assert any("fastest predicted step" in p for p in step_range_problems(fast))
    real = SpsAdditiveCostTable(0.01, [1, 8], [0.0, 0.001], [0, 64], [0.0, 0.002])
    assert step_range_problems(real) == []


def test_a_one_probe_table_is_sglangs_verify_all() -> None:
    assert "single probe" in self_check(SpsCostTable([8], [95.0], 8))[0]


@pytest.mark.parametrize("preset", PRESETS.values(), ids=PRESETS.keys())
def test_the_simulators_gpus_are_well_above_the_floor(preset: CostPreset) -> None:
    """The simulator runs the e2e suite and the bench matrix: its fastest step (bs 1, one
    token, the shortest context, which halves the stated cost) is 20x the floor. Its
    records carry model time whatever its time scale
    (`test_sim_contract.py::test_step_times_are_model_time_whatever_the_time_scale`)."""
    assert 0.5 * preset.decode_seconds(1, 1) > 20 * MIN_STEP_SECONDS
    assert preset.decode_seconds(1, 1) < MAX_STEP_SECONDS
