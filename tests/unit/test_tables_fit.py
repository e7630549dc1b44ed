"""Fits: diagonal medians, additive hat-basis fit vs the reference's 64-wide M bins, quality."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from round_lines import round_line
from sps_operator.api.kinds import TableKind
from sps_operator.tables.fit import (
    fit_additive_binned_reference,
    fit_additive_cells,
    fit_from_rounds,
    reference_m_bin,
)
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable, load_sps_table_text
from sps_operator.tables.hatbasis import hat_weights
from sps_operator.tables.quality import Cell, evaluate, predicted_step_seconds

K = 8
GAMMA = 7
CAPTURE_BS = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4)]
TIERS = sorted({b * K for b in CAPTURE_BS})


def hat_basis(knots: Sequence[float], x: Sequence[float]) -> npt.NDArray[np.float64]:
    """The hat functions as a dense matrix (the fit builds the sparse one: `hatbasis`).

    Row i holds weights w with sum 1 such that Σ w_k f(knot_k) is SGLang's
    `_interp_clamped(knots, f, x_i)`.
    """
    lo, hi, frac = hat_weights(knots, x)
    basis = np.zeros((len(x), len(knots)))
    rows = np.arange(len(x))
    np.add.at(basis, (rows, lo), 1.0 - frac)
    np.add.at(basis, (rows, hi), frac)
    return basis


def tier(m: int) -> int:
    return next(t for t in TIERS if t >= m)


def truth(bs: int, m: int) -> float:
    # A sim-like cost: bias + per-request + per-token on the replayed tier.
    return 0.0105 + 45e-6 * bs + 6e-6 * tier(m)


def server_m(bs: int, frac: float) -> int:
    return min(bs + int(frac * (bs * GAMMA)), bs * K)


def sweep_cells(
    bss: list[int], fracs: list[float], noise: float = 0.0, seed: int = 1, repeats: int = 1
) -> list[Cell]:
    rng = random.Random(seed)
    cells = []
    for _ in range(repeats):
        for bs in bss:
            for frac in fracs:
                m = server_m(bs, frac)
                t = truth(bs, m) * (1 + rng.gauss(0, noise))
                cells.append(Cell(bs=bs, m=m, t=t, tier=tier(m)))
    return cells


def grid_rms_rel(table: SpsAdditiveCostTable, max_bs: int) -> float:
    errors = []
    for bs in range(1, max_bs + 1):
        for m in range(bs, bs * K + 1):
            t = truth(bs, m)
            errors.append((predicted_step_seconds(table, bs, m) - t) / t)
    return math.sqrt(sum(e * e for e in errors) / len(errors))


def test_hat_basis_reproduces_sglang_interpolation() -> None:
    knots = [0, 64, 128, 256]
    values = [0.0, 0.0009, 0.0031, 0.0087]
    table = SpsAdditiveCostTable(0.01, [1], [0.0], knots, values)
    xs = [-5, 0, 10, 64, 100, 200, 256, 1000]
    basis = hat_basis(knots, xs)
    for row, x in zip(basis, xs, strict=True):
        assert sum(row) == pytest.approx(1.0)
        assert float(row @ values) == pytest.approx(table.theta(x))


def test_reference_bins_collapse_small_m_into_zero() -> None:
    assert reference_m_bin(8) == 0
    assert reference_m_bin(32) == 0  # banker's rounding: round(0.5) == 0
    assert reference_m_bin(33) == 64
    assert reference_m_bin(96) == 128  # round(1.5) == 2


def test_diagonal_fit_takes_median_across_repeats() -> None:
    rounds = [
        round_line(1, 8, 90.0, None, 0),
        round_line(1, 8, 100.0, None, 1),
        round_line(1, 8, 400.0, None, 2),  # an outlier repeat; the median ignores it
        round_line(4, 32, 80.0, None, 0),
        round_line(4, 32, 70.0, None, 1),
    ]
    result = fit_from_rounds(rounds, kind=TableKind.DIAGONAL)
    assert isinstance(result.table, SpsCostTable)
    assert result.table.sample_batch_tokens == (8, 32)
    assert result.table.sample_steps_per_sec == (100.0, 75.0)
    assert result.table.max_batch_tokens == 32
    assert result.quality.num_cells == 5
    assert result.quality.worst_cell is not None
    assert result.quality.worst_cell.m == 8
    assert result.quality.worst_cell.measured_ms == pytest.approx(2.5)
    assert (
        fit_from_rounds(rounds, kind=TableKind.DIAGONAL, max_batch_tokens=64)
        .table.to_json()
        .endswith('"max_batch_tokens":64}')
    )
    # What we write loads back.
    assert load_sps_table_text(result.table.to_json()) == result.table


def test_diagonal_fit_refuses_offdiagonal_only_rounds() -> None:
    with pytest.raises(ValueError, match="as an Additive table"):
        fit_from_rounds([round_line(4, 20, 50.0, 0.5)], kind=TableKind.DIAGONAL)
    with pytest.raises(ValueError, match="run the profiler first"):
        fit_from_rounds([], kind=TableKind.DIAGONAL)
    with pytest.raises(ValueError, match="kind must be"):
        fit_from_rounds([round_line(4, 32, 50.0, None)], kind="cubic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="steps_per_sec"):
        fit_from_rounds([{"batch_size_per_rank": 1, "batch_tokens": 8}], kind=TableKind.ADDITIVE)


def test_additive_fit_recovers_exact_additive_truth() -> None:
    bss = [1, 2, 4, 8, 16, 32]
    fracs = [0.125, 0.25, 0.5, 0.75, 1.0]

    def additive(bs: int, m: int) -> float:
        return 0.01 + 50e-6 * bs + 5e-6 * m

    cells = [
        Cell(bs=bs, m=server_m(bs, f), t=additive(bs, server_m(bs, f))) for bs in bss for f in fracs
    ]
    result = fit_additive_cells(cells)
    table = result.table
    assert isinstance(table, SpsAdditiveCostTable)
    assert result.quality.rms_ms < 1e-3  # sub-microsecond
    assert result.quality.r2 > 0.9999
    for bs in bss:
        for m in range(bs, bs * K + 1):
            assert table.step_seconds_at(bs, m) == pytest.approx(additive(bs, m), rel=2e-3)


def test_additive_fit_beats_reference_bins_by_half_on_the_same_cells() -> None:
    bss = [1, 2, 4, 8, 16, 32, 48, 64]
    fracs = [0.1, 0.25, 0.5, 0.75, 1.0]
    cells = sweep_cells(bss, fracs, noise=0.01, repeats=2)
    ours = fit_additive_cells(cells, tiers=TIERS)
    reference = fit_additive_binned_reference(cells)
    assert isinstance(ours.table, SpsAdditiveCostTable)
    assert isinstance(reference.table, SpsAdditiveCostTable)
    ours_error = grid_rms_rel(ours.table, 64)
    reference_error = grid_rms_rel(reference.table, 64)
    assert ours_error <= 0.5 * reference_error, (ours_error, reference_error)
    # A staircase over the captured tiers: constant inside a tier, jumping at its edge.
    table = ours.table
    assert table.theta(17) == pytest.approx(table.theta(24))
    assert table.theta(25) > table.theta(24)
    assert 0 in reference.table.m_probes  # the reference collapses every M <= 32 into bin 0


def test_additive_fit_without_tiers_keeps_small_m_apart() -> None:
    cells = [Cell(bs=c.bs, m=c.m, t=c.t) for c in sweep_cells([1, 2, 4, 8, 16], [0.1, 0.5, 1.0])]
    result = fit_additive_cells(cells)
    assert isinstance(result.table, SpsAdditiveCostTable)
    assert result.table.m_probes[:3] == (1, 3, 4)  # measured M are the knots
    assert result.quality.rms_rel < 0.01


def test_additive_fit_stays_well_posed_with_few_cells() -> None:
    # One M per batch size: alpha and theta alone are confounded; the penalty decides.
    cells = [Cell(bs=bs, m=bs * K, t=truth(bs, bs * K)) for bs in (1, 2, 4, 8)]
    result = fit_additive_cells(cells)
    table = result.table
    assert isinstance(table, SpsAdditiveCostTable)
    assert all(math.isfinite(v) for v in (*table.alpha_seconds, *table.theta_seconds))
    for c in cells:
        assert predicted_step_seconds(table, c.bs, c.m) == pytest.approx(c.t, rel=0.02)
    with pytest.raises(ValueError, match="at least 4 distinct"):
        fit_additive_cells(cells[:3])


def test_additive_quality_reports_probe_se_and_worst_cell() -> None:
    cells = sweep_cells([1, 4, 16, 32], [0.25, 0.5, 1.0], noise=0.02, repeats=3, seed=7)
    cells.append(Cell(bs=16, m=server_m(16, 0.5), t=truth(16, server_m(16, 0.5)) * 1.5))
    result = fit_additive_cells(cells)
    q = result.quality
    assert q.worst_cell is not None
    assert (q.worst_cell.bs, q.worst_cell.m) == (16, server_m(16, 0.5))
    assert q.worst_cell.rel_error > 0.3
    assert set(q.probe_se_ms) >= {"bias", "bs=4", "bs=16", "bs=32"}
    assert all(v >= 0 for v in q.probe_se_ms.values())
    assert 0 < q.r2 < 1
    data = q.to_dict()
    assert data["worst_cell"]["bs"] == 16


def test_evaluate_on_perfect_table_has_zero_error() -> None:
    table = SpsCostTable([8, 16], [100.0, 50.0], 16)
    cells = [Cell(bs=1, m=8, t=0.01), Cell(bs=2, m=16, t=0.02)]
    q = evaluate(table, cells)
    assert q.rms_ms == pytest.approx(0.0, abs=1e-12)
    assert q.r2 == pytest.approx(1.0)


def test_fit_from_rounds_additive_uses_all_rounds() -> None:
    rounds = []
    for bs in (1, 2, 4, 8):
        rounds.append(round_line(bs, bs * K, 1 / truth(bs, bs * K), None))
        for frac in (0.25, 0.5):
            m = server_m(bs, frac)
            rounds.append(round_line(bs, m, 1 / truth(bs, m), frac))
    result = fit_from_rounds(rounds, kind=TableKind.ADDITIVE)
    assert result.kind == TableKind.ADDITIVE
    assert result.quality.num_cells == 12
    assert result.quality.rms_rel < 0.02
    assert load_sps_table_text(result.table.to_json()) == result.table


def test_diagonal_staircase_over_tiers_tracks_padded_graphs() -> None:
    bss = [1, 2, 4, 8, 16, 24, 32]
    rounds = [round_line(bs, bs * K, 1 / truth(bs, bs * K), None) for bs in bss]
    measured = fit_from_rounds(rounds, kind=TableKind.DIAGONAL, diagonal_probes="measured").table
    stair = fit_from_rounds(rounds, kind=TableKind.DIAGONAL, tiers=TIERS).table
    assert isinstance(measured, SpsCostTable) and isinstance(stair, SpsCostTable)
    assert measured.sample_batch_tokens == tuple(bs * K for bs in bss)
    # Every tier between 8 and 256 gets its own step, switching just above the previous tier.
    assert stair.sample_batch_tokens[:3] == (8, 9, 17)
    assert stair.max_batch_tokens == 256
    for bs in bss:  # measured probes are reproduced exactly
        assert 1 / stair.lookup(bs * K) == pytest.approx(truth(bs, bs * K))

    def diag_error(table: SpsCostTable) -> float:
        errs = [
            (1 / table.lookup(bs * K) - truth(bs, bs * K)) / truth(bs, bs * K)
            for bs in range(1, 33)
        ]
        return math.sqrt(sum(e * e for e in errs) / len(errs))

    assert diag_error(stair) < 0.2 * diag_error(measured)
    assert load_sps_table_text(stair.to_json()) == stair
    # Tiers recorded in the rounds are used by default.
    with_tiers = [{**r, "graph_tiers": TIERS} for r in rounds]
    assert fit_from_rounds(with_tiers, kind=TableKind.DIAGONAL).table == stair
    widened = fit_from_rounds(with_tiers, kind=TableKind.DIAGONAL, max_batch_tokens=512).table
    assert isinstance(widened, SpsCostTable) and widened.max_batch_tokens == 512
    with pytest.raises(ValueError, match="max_batch_tokens must be >= the largest probe"):
        fit_from_rounds(with_tiers, kind=TableKind.DIAGONAL, max_batch_tokens=100)


def test_additive_fit_without_tiers_does_not_chase_noise() -> None:
    # Cap-accept style cells (no tier): 36 distinct M for 36 cells. Interpolating them
    # would fit the noise; the smoothing keeps it at half the reference's error or better.
    def smooth(bs: int, m: int) -> float:
        return 0.0105 + 45e-6 * bs + 6e-6 * m

    rng = random.Random(1)
    cells = [
        Cell(bs, server_m(bs, f), smooth(bs, server_m(bs, f)) * (1 + rng.gauss(0, 0.01)))
        for bs in (1, 2, 4, 8, 16, 24, 32, 40, 48)
        for f in (0.25, 0.5, 0.75, 1.0)
    ]
    ours = fit_additive_cells(cells).table
    reference = fit_additive_binned_reference(cells).table

    def error(table: SpsAdditiveCostTable) -> float:
        errs = [
            (table.step_seconds_at(bs, m) - smooth(bs, m)) / smooth(bs, m)
            for bs in range(1, 49)
            for m in range(bs, bs * K + 1)
        ]
        return math.sqrt(sum(e * e for e in errs) / len(errs))

    assert isinstance(ours, SpsAdditiveCostTable) and isinstance(reference, SpsAdditiveCostTable)
    assert error(ours) <= 0.5 * error(reference)


def test_additive_fit_thins_knots_and_refuses_more_cells_than_a_profile_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sps_operator.tables import fit as fit_module

    rng = random.Random(2)
    cells = [
        Cell(bs, m, truth(bs, m) * (1 + rng.gauss(0, 0.005)))
        for bs in range(1, 41)
        for m in range(bs, bs * K + 1, max(1, bs))
    ]
    monkeypatch.setattr(fit_module, "MAX_KNOTS_PER_AXIS", 16)
    table = fit_additive_cells(cells).table
    assert isinstance(table, SpsAdditiveCostTable)
    assert len(table.bs_probes) == 16 and len(table.m_probes) == 16
    assert (table.bs_probes[0], table.bs_probes[-1]) == (1, 40)  # the ends are kept
    assert grid_rms_rel(table, 40) < 0.05
    monkeypatch.setattr(fit_module, "MAX_ADDITIVE_CELLS", len(cells) - 1)
    with pytest.raises(ValueError, match=f"at most {len(cells) - 1} distinct"):
        fit_additive_cells(cells)


def test_sparse_design_matches_the_dense_hat_basis() -> None:
    from sps_operator.tables.hatbasis import additive_design

    bs_knots, x_knots = [1, 4, 16], [8, 32, 128, 512]
    bs, x = [1, 2, 16, 30], [8, 40, 128, 600]
    design = additive_design(bs, bs_knots, x, x_knots)
    dense = [
        [1.0, *a[1:], *t[1:]]
        for a, t in zip(hat_basis(bs_knots, bs), hat_basis(x_knots, x), strict=True)
    ]
    beta = [0.01, 1e-4, 3e-4, 2e-4, 5e-4, 9e-4]
    import numpy as np

    assert design.times(np.array(beta)) == pytest.approx(np.array(dense) @ np.array(beta))
