"""`kubectl sps diff`: the grid and the predicted step-time changes."""

from __future__ import annotations

import pytest

from sps_operator.plugin.diff import diff_tables, grid, render_diff
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable

DIAG_A = SpsCostTable([8, 16, 32], [1000.0, 500.0, 250.0], 64)
DIAG_B = SpsCostTable([8, 24], [800.0, 400.0], 64)
ADD = SpsAdditiveCostTable(0.001, [1, 8], [0.0, 0.001], [0, 16, 32], [0.0, 0.001, 0.003])


def test_grid_of_two_diagonal_tables_is_the_union_of_probes() -> None:
    assert grid(DIAG_A, DIAG_B) == [(None, 8), (None, 16), (None, 24), (None, 32)]


def test_grid_with_an_additive_table_is_bs_by_m_with_m_at_least_bs() -> None:
    points = grid(DIAG_A, ADD)
    assert (1, 1) in points and (8, 8) in points  # M = bs always compared
    assert all(bs is not None and m >= bs for bs, m in points)
    assert {m for bs, m in points if bs == 8} == {8, 16, 32}
    assert {m for bs, m in points if bs == 1} == {1, 8, 16, 32}  # M=0 probe dropped


def test_diagonal_changes_follow_the_floor_lookup() -> None:
    result = diff_tables(DIAG_A, DIAG_B)
    by_m = {p.m: p for p in result.points}
    # M=16: old 1/500 s = 2 ms; new floor(16) -> probe 8 -> 1/800 s = 1.25 ms.
    assert by_m[16].old_ms == pytest.approx(2.0)
    assert by_m[16].new_ms == pytest.approx(1.25)
    assert by_m[16].change == pytest.approx(-0.375)
    # M=24: old floor -> probe 16 (2 ms); new probe 24 (2.5 ms).
    assert by_m[24].change == pytest.approx(0.25)
    summary = result.summary()
    assert summary["points"] == 4
    assert summary["largestChange"] == pytest.approx(-0.375)
    assert summary["largestAt"] == {"batchSize": None, "verifyTokens": 16}


def test_identical_tables_change_nothing() -> None:
    result = diff_tables(ADD, ADD)
    assert all(p.change == 0.0 for p in result.points)
    assert result.summary()["meanAbsChange"] == 0.0


def test_additive_step_time_is_bias_alpha_theta() -> None:
    faster = SpsAdditiveCostTable(0.0005, [1, 8], [0.0, 0.001], [0, 16, 32], [0.0, 0.001, 0.003])
    result = diff_tables(ADD, faster)
    point = next(p for p in result.points if (p.bs, p.m) == (8, 16))
    # old: 1 + 1 + 1 = 3 ms, new: 0.5 + 1 + 1 = 2.5 ms
    assert point.old_ms == pytest.approx(3.0)
    assert point.new_ms == pytest.approx(2.5)
    text = render_diff(result, "old", "new")
    assert text.splitlines()[0] == "--- old"
    assert "BS \\ M" in text
    assert "-16.7%" in text


def test_render_one_dimensional() -> None:
    text = render_diff(diff_tables(DIAG_A, DIAG_B), "a", "b")
    assert "largest -37.5% at M=16 (2.000 -> 1.250 ms)" in text
    last = text.splitlines()[-1].split()
    assert last == ["32", "4.000", "2.500", "-37.5%"]
