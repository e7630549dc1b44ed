"""Honest fit quality: leave-one-out error, round CIs and the combined error bound."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest

from sps_operator.api.kinds import TableKind
from sps_operator.tables.bound import band_points
from sps_operator.tables.fit import fit_additive_cells, fit_from_rounds
from sps_operator.tables.formats import SpsCostTable
from sps_operator.tables.quality import (
    Cell,
    error_bound_rel,
    evaluate,
    leave_one_out_rel,
    predicted_step_seconds,
)

K = 8
GAMMA = 7
BSS = [1, 2, 4, 8, 16, 24, 32, 40, 48]


def curved(bs: int) -> float:
    # A diagonal truth with curvature: linear interpolation between probes is off.
    return 0.010 + 2e-4 * bs + 4e-6 * bs * bs


def diagonal_round(bs: int, t: float, ci_rel_half: float | None = None) -> dict:
    round_ = {
        "repeat": 0,
        "batch_size": bs,
        "batch_size_per_rank": bs,
        "frac": None,
        "batch_tokens": bs * K,
        "steps_per_sec": 1.0 / t,
    }
    if ci_rel_half is not None:
        round_ |= {
            "median_step_time": t,
            "ci_low": t * (1 - ci_rel_half),
            "ci_high": t * (1 + ci_rel_half),
        }
    return round_


def diagonal_grid_max_error(table: SpsCostTable, truth, max_bs: int) -> float:  # type: ignore[no-untyped-def]
    return max(
        abs(table.step_seconds(bs * K) - truth(bs)) / truth(bs) for bs in range(1, max_bs + 1)
    )


def test_diagonal_through_its_medians_still_reports_its_interpolation_error() -> None:
    # Repeats 1: the table passes through every measured median, so RMS is 0 and R² is 1;
    # the planner still reads values between probes that nobody measured.
    rounds = [diagonal_round(bs, curved(bs)) for bs in BSS]
    result = fit_from_rounds(rounds, kind=TableKind.DIAGONAL, diagonal_probes="measured")
    q = result.quality
    assert q.rms_ms == pytest.approx(0.0, abs=1e-12)
    assert q.r2 == pytest.approx(1.0)
    assert q.loo_rel_rms is not None and q.loo_rel_max is not None
    assert q.loo_rel_max > 0.05  # a floor step over 8 → 16 → 24 … is far off in between
    assert q.loo_rel_rms <= q.loo_rel_max
    assert q.ci_rel_max is None  # these rounds carry no CI
    assert isinstance(result.table, SpsCostTable)
    assert q.error_bound_rel >= diagonal_grid_max_error(result.table, curved, 48)


def test_loo_is_none_with_two_probes_and_the_bound_falls_back_to_the_step() -> None:
    rounds = [diagonal_round(1, 0.010), diagonal_round(8, 0.012)]
    q = fit_from_rounds(rounds, kind=TableKind.DIAGONAL).quality
    assert q.loo_rel_rms is None and q.loo_rel_max is None
    assert q.error_bound_rel == pytest.approx(0.2)


def test_round_confidence_intervals_enter_the_bound_widened_for_all_probes() -> None:
    rounds = [diagonal_round(bs, 0.010 + 1e-4 * bs, ci_rel_half=0.01) for bs in BSS]
    rounds[3] = diagonal_round(8, 0.010 + 8e-4, ci_rel_half=0.03)
    tiers = [bs * K for bs in range(1, 49)]
    q = fit_from_rounds(rounds, kind=TableKind.DIAGONAL, tiers=tiers).quality
    assert q.ci_rel_max == pytest.approx(0.03)
    # A linear truth interpolated linearly over the tiers: LOO is ~0, so the measurement
    # term decides; 9 probes at once need more than each probe's own 95 % half-width.
    assert q.loo_rel_max == pytest.approx(0.0, abs=1e-9)
    assert 0.03 < q.error_bound_rel < 0.06


def test_quality_fields_serialise() -> None:
    rounds = [diagonal_round(bs, curved(bs), ci_rel_half=0.005) for bs in BSS]
    data = fit_from_rounds(rounds, kind=TableKind.DIAGONAL).quality.to_dict()
    assert set(data) >= {"loo_rel_rms", "loo_rel_max", "ci_rel_max", "error_bound_rel"}
    assert data["ci_rel_max"] == pytest.approx(0.005)
    json.dumps(data, allow_nan=False)


def test_one_probe_diagonal_is_refused_with_what_to_do() -> None:
    with pytest.raises(ValueError, match="at least two batch sizes"):
        fit_from_rounds([diagonal_round(8, 0.01)], kind=TableKind.DIAGONAL)
    with pytest.raises(ValueError, match="at least two batch sizes"):
        fit_from_rounds(
            [diagonal_round(8, 0.01), diagonal_round(8, 0.011)], kind=TableKind.DIAGONAL
        )


@pytest.mark.parametrize("bad", ["0.1", math.inf, True, [0.1]])
def test_a_malformed_round_ci_is_refused(bad: object) -> None:
    rounds = [diagonal_round(bs, curved(bs), ci_rel_half=0.01) for bs in (1, 2, 4)]
    rounds[1]["ci_high"] = bad
    with pytest.raises(ValueError, match="ci_high"):
        fit_from_rounds(rounds, kind=TableKind.DIAGONAL)


def test_a_median_outside_its_ci_is_refused() -> None:
    rounds = [diagonal_round(bs, curved(bs), ci_rel_half=0.01) for bs in (1, 2, 4)]
    rounds[2]["ci_low"] = rounds[2]["median_step_time"] * 1.5
    with pytest.raises(ValueError, match="inside its CI"):
        fit_from_rounds(rounds, kind=TableKind.DIAGONAL)


def test_leave_one_out_skips_probes_that_would_extrapolate() -> None:
    probes = [Cell(1, 8, 0.01), Cell(2, 16, 0.02), Cell(4, 32, 0.04)]
    errors = leave_one_out_rel(probes, lambda i: None if i != 1 else 0.025)
    assert errors == [pytest.approx(0.25)]


def test_error_bound_is_finite_and_never_negative() -> None:
    assert error_bound_rel(loo_rel_max=None, ci_rel_max=None, num_probes=1, probe_seconds=[]) == 0
    assert error_bound_rel(
        loo_rel_max=0.01, ci_rel_max=0.02, num_probes=1, probe_seconds=[]
    ) == pytest.approx(0.02, rel=1e-4)
    with pytest.raises(ValueError, match="non-finite"):
        error_bound_rel(loo_rel_max=math.inf, ci_rel_max=None, num_probes=1, probe_seconds=[])


def test_evaluate_refuses_no_cells() -> None:
    with pytest.raises(ValueError, match="at least one"):
        evaluate(SpsCostTable([8, 16], [100.0, 50.0], 16), [])


def server_m(bs: int, frac: float) -> int:
    return min(bs + int(frac * (bs * GAMMA)), bs * K)


def interacting(bs: int, m: int) -> float:
    # Not additive: a bs × M interaction the additive table cannot represent.
    return 0.0105 + 45e-6 * bs + 6e-6 * m + 4e-8 * bs * m


def test_additive_loo_flags_a_bad_cell_and_the_bound_covers_the_grid() -> None:
    rng = random.Random(3)
    fracs = [0.25, 0.5, 0.75, 1.0]
    cells = [
        Cell(
            bs,
            server_m(bs, f),
            interacting(bs, server_m(bs, f)) * (1 + rng.gauss(0, 0.01)),
            ci_rel_half=0.02,
        )
        for bs in BSS
        for f in fracs
    ]
    result = fit_additive_cells(cells)
    q = result.quality
    assert q.loo_rel_max is not None and q.loo_rel_rms is not None
    grid_max = max(
        abs(predicted_step_seconds(result.table, bs, m) - interacting(bs, m)) / interacting(bs, m)
        for bs in range(1, 49)
        for m in range(bs, bs * K + 1)
    )
    assert q.error_bound_rel >= grid_max
    spoiled = [*cells[:10], Cell(cells[10].bs, cells[10].m, cells[10].t * 1.3), *cells[11:]]
    assert fit_additive_cells(spoiled).quality.loo_rel_max > 0.2  # type: ignore[operator]


def test_a_staircase_step_holding_several_batch_sizes_widens_the_bound() -> None:
    # Capture list ... 32, 40 ...: bs 33..40 all replay the 40-request graph (320 tokens),
    # but with fewer requests they cost less than the full-width value the table holds.
    capture = [1, 2, 4, 8, 16, 24, 32, 40, 48]
    tiers = [b * K for b in capture]

    def padded(bs: int) -> float:
        tier = next(t for t in tiers if t >= bs * K)
        return 0.0105 + 2e-4 * bs + 6e-6 * tier

    rounds = [diagonal_round(bs, padded(bs), ci_rel_half=0.002) for bs in capture]
    result = fit_from_rounds(rounds, kind=TableKind.DIAGONAL, tiers=tiers)
    assert isinstance(result.table, SpsCostTable)
    real = diagonal_grid_max_error(result.table, padded, 48)
    q = result.quality
    assert q.loo_rel_max is not None and q.ci_rel_max is not None
    assert max(q.loo_rel_max, q.ci_rel_max * 2) < real  # LOO and CIs alone would understate
    assert q.error_bound_rel >= real


def additive_truth(bs: int, m: int) -> float:
    return 0.0105 + 45e-6 * bs + 6e-6 * m


def noisy_additive_cells(seed: int, noise: float) -> list[Cell]:
    """The bench's 36 cells (bs × fracs) on an additive truth, each with honest noise and
    the CI the stopping rule would report for it."""
    rng = random.Random(seed)
    return [
        Cell(
            bs,
            server_m(bs, f),
            additive_truth(bs, server_m(bs, f)) * (1 + rng.gauss(0, noise)),
            ci_rel_half=1.96 * noise,
        )
        for bs in BSS
        for f in (0.25, 0.5, 0.75, 1.0)
    ]


def additive_grid_max_error(table, truth) -> float:  # type: ignore[no-untyped-def]
    return max(
        abs(predicted_step_seconds(table, bs, m) - truth(bs, m)) / truth(bs, m)
        for bs in range(1, 49)
        for m in range(bs, bs * K + 1)
    )


def test_the_additive_bound_is_the_fits_band_not_one_rounds_ci() -> None:
    # 36 cells each 1 % noisy: the table averages them, so it is far better than one
    # round's CI. The bound propagates the cells' noise through the fit (a simultaneous
    # band over the grid): it covers the real max error in ≥ 95 % of tables and is within
    # 2× of it in half of them. One round's CI × a Bonferroni z made it 3.3× at the median.
    ratios = []
    for seed in range(30):
        result = fit_additive_cells(noisy_additive_cells(seed, 0.01))
        real = additive_grid_max_error(result.table, additive_truth)
        ratios.append(result.quality.error_bound_rel / real)
    assert sum(r >= 1 for r in ratios) >= 28
    assert statistics.median(ratios) <= 2.3


def test_the_additive_bound_covers_a_bs_at_one_token_per_request() -> None:
    # The planner reads M = bs (one verify token per request) at bs 48, far below the
    # smallest M measured there (132): the band is scored there too, not only at the cells.
    cells = noisy_additive_cells(0, 0.02)
    result = fit_additive_cells(cells)
    assert result.quality.error_bound_rel >= additive_grid_max_error(result.table, additive_truth)
    points = set(zip(*band_points(cells, [1, 48], lambda m: m), strict=True))
    assert {(48, 48), (48, 384), (1, 1), (1, 8)} <= points


def test_the_leave_one_out_bias_counts_only_beyond_the_noise() -> None:
    # Leave-one-out errors as large as their noise: no bias, the bound is the band.
    assert error_bound_rel(
        loo_rel_max=0.02,
        ci_rel_max=0.05,
        num_probes=4,
        probe_seconds=[],
        loo_rel=[0.01, -0.01, 0.01, -0.01],
        noise_band_rel=0.004,
        loo_noise_sd_rel=[0.01, 0.01, 0.01, 0.01],
    ) == pytest.approx(0.004)
    # Twice their noise: a bias of √(4 − 1) × the noise on top.
    assert error_bound_rel(
        loo_rel_max=0.02,
        ci_rel_max=0.05,
        num_probes=4,
        probe_seconds=[],
        loo_rel=[0.02, -0.02, 0.02, -0.02],
        noise_band_rel=0.004,
        loo_noise_sd_rel=[0.01, 0.01, 0.01, 0.01],
        within_step_rel=0.001,
    ) == pytest.approx(0.004 + math.sqrt(3) * 0.01 + 0.001)
    # One probe far beyond its noise: what it adds is its excess over the family-wise z,
    # when that beats the pooled bias.
    z = statistics.NormalDist().inv_cdf(1 - 0.05 / 8)
    assert error_bound_rel(
        loo_rel_max=0.5,
        ci_rel_max=0.05,
        num_probes=4,
        probe_seconds=[],
        loo_rel=[0.5, 0.0, 0.0, 0.0],
        noise_band_rel=0.004,
        loo_noise_sd_rel=[0.01, 0.01, 0.01, 0.01],
    ) == pytest.approx(0.004 + (0.5 - z * 0.01))
    with pytest.raises(ValueError, match="one noise figure"):
        error_bound_rel(
            loo_rel_max=0.02,
            ci_rel_max=0.05,
            num_probes=4,
            probe_seconds=[],
            loo_rel=[0.02],
            noise_band_rel=0.004,
            loo_noise_sd_rel=[],
        )


def test_cells_without_a_ci_keep_the_cruder_bound() -> None:
    # Another profiler's rounds carry no CI: nothing to propagate, so the bound is the
    # leave-one-out one as before (never a band of zero width).
    cells = [Cell(c.bs, c.m, c.t) for c in noisy_additive_cells(1, 0.01)]
    q = fit_additive_cells(cells).quality
    assert q.loo_rel_max is not None
    assert q.error_bound_rel == pytest.approx(q.loo_rel_max)


def test_one_cell_far_off_is_not_diluted_by_the_others() -> None:
    # One round measured slow (a clock ramp nobody took out): its cell is 15 % off. Pooled
    # over 36 cells its leave-one-out error hardly moves a mean square; the bound must still
    # cover what it does to the table.
    cells = noisy_additive_cells(2, 0.01)
    bad = 32  # bs 48 at frac 0.25: few cells share its knots, so it moves the table
    cells[bad] = Cell(cells[bad].bs, cells[bad].m, cells[bad].t * 1.25, ci_rel_half=0.0196)
    result = fit_additive_cells(cells)
    assert result.quality.error_bound_rel >= additive_grid_max_error(result.table, additive_truth)
