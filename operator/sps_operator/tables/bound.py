"""What the cells' measurement noise leaves in an additive table (pure: numpy, no I/O).

The noise part of the additive fit's error bound (`quality.evaluate`, `_fitted_bound`):
each merged cell's noise from its rounds' CIs, propagated through the penalised fit as a
simultaneous band over the grid the planner reads, and the noise a leave-one-out residual
carries, against which `quality` weighs the LOO errors for bias. And what the clock-ramp
correction's own uncertainty leaves: one error shared by every corrected round of a run
(`ramp_band_rel`), so no average over cells shrinks it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np

from sps_operator.tables.hatbasis import FloatArray, SparseDesign
from sps_operator.tables.quality import BOUND_COVERAGE, ROUND_CI_LEVEL_Z, Cell

# Draws of the fit's noise for the simultaneous band (deterministic: a fixed seed).
BAND_DRAWS = 4000


def table_noise_band_rel(
    design: SparseDesign,
    a_inv: FloatArray,
    w: FloatArray,
    y: FloatArray,
    noise_rel: Sequence[float],
    beta: FloatArray,
    grid: SparseDesign,
) -> float:
    """Relative half-width of a simultaneous band (`BOUND_COVERAGE`) of the fitted step time
    over the `grid` points: what the cells' measurement noise leaves in the table, at all of
    them at once.

    β = A⁻¹XᵀWy, so Cov(β) = A⁻¹ XᵀWΣWX A⁻¹ with Σ the cells' variances. The fitted values
    are correlated (they share knots), so the band's width comes from draws of β's error,
    not from a Bonferroni z that treats the points as independent.
    """
    variance = (np.asarray(noise_rel, dtype=float) * y) ** 2
    cov = a_inv @ design.gram(w * w * variance) @ a_inv
    eigenvalues, vectors = np.linalg.eigh((cov + cov.T) / 2)
    root = vectors * np.sqrt(np.clip(eigenvalues, 0.0, None))
    draws = np.random.default_rng(0).standard_normal((BAND_DRAWS, root.shape[1])) @ root.T
    design = grid
    fitted = design.times(beta)
    scale = 1.0 / np.where(fitted > 0, fitted, np.inf)
    # |x_i · δβ| / ŷ_i for every draw and cell: (draws × width) at the cells' columns.
    errors = np.abs(np.einsum("ck,dck->dc", design.vals, draws[:, design.cols])) * scale
    return float(np.quantile(np.max(errors, axis=1), BOUND_COVERAGE))


def ramp_band_rel(
    design: SparseDesign,
    a_inv: FloatArray,
    w: FloatArray,
    y: FloatArray,
    shifts: Sequence[tuple[float, float]],
    beta: FloatArray,
    grid: SparseDesign,
) -> float:
    """Largest relative error over the `grid` points that the clock-ramp correction leaves
    when the true slow-down sits at either end of the ramp model's region for every round
    at once (`shifts`: each merged cell's relative shift, low and high; (0, 0) when not
    corrected).

    The correction is one (A, τ) for the whole run: a slow-down larger than the best fit's
    is larger for every round on the ramp (the region's ends move every round's correction
    the same way). As independent noise, 36 cells' average shrank it by √n and the bound
    missed tables whose early rows were all over-corrected by 2–3 %; here it is propagated
    as one shift, Δβ = A⁻¹XᵀW(y∘δ).
    """
    fitted = grid.times(beta)
    scale = 1.0 / np.where(fitted > 0, fitted, np.inf)
    worst = 0.0
    for end in (0, 1):
        delta = np.array([s[end] for s in shifts], dtype=float)
        if not np.any(delta):
            continue
        shift_beta = a_inv @ design.transpose_times(w * y * delta)
        worst = max(worst, float(np.max(np.abs(grid.times(shift_beta)) * scale)))
    return worst


def unsteady_shift_rel(
    design: SparseDesign,
    kept_w: FloatArray,
    y: FloatArray,
    penalty: FloatArray,
    beta: FloatArray,
    grid: SparseDesign,
) -> float:
    """Largest relative change of the fitted step time over the `grid` points when the
    cells weighted 0 in `kept_w` are left out (the same smoothing `penalty`, λP, so the
    table is extrapolated over them by its smoothness).

    Those are cells of a run on a clock ramp whose rounds' drift test dropped their first
    steps (`quality.Cell.drift_dropped`): the level was still falling when the round began
    (the ramp re-armed by an idle gap), and what the round kept may still be falling. On
    the bench that left rounds 7–21 % slow inside CIs of ±1–5 %, at the table's ends where
    leave-one-out says nothing. The table is trusted no further than it holds without them.
    """
    gram = design.gram(kept_w)
    system = gram + penalty
    system = system + 1e-9 * (float(np.trace(system)) / max(system.shape[0], 1)) * np.eye(
        system.shape[0]
    )
    kept_beta = np.linalg.lstsq(system, design.transpose_times(kept_w * y), rcond=None)[0]
    fitted = grid.times(beta)
    scale = 1.0 / np.where(fitted > 0, fitted, np.inf)
    return float(np.max(np.abs(grid.times(beta - kept_beta)) * scale))


def band_points(
    cells: Sequence[Cell], bs_knots: Sequence[int], x_of: Callable[[int], int]
) -> tuple[list[int], list[int]]:
    """(bs, x) points where the table's noise is largest over the grid the planner reads.

    The planner reads every bs in the measured range at every M from bs (one verify token
    per request) to bs·K (the diagonal; K from the cells). The table is linear in the hats
    between knots, and a variance is convex along a segment, so the largest variance over
    the grid is at a bs knot with a θ knot or an end of that bs's M range.
    """
    k = max(c.m // c.bs for c in cells)
    points_bs: list[int] = []
    points_x: list[int] = []
    knots_x = sorted({x_of(c.m) for c in cells})
    for b in bs_knots:
        lo, hi = x_of(b), x_of(b * k)
        for x in {lo, hi, *(x for x in knots_x if lo <= x <= hi)}:
            points_bs.append(b)
            points_x.append(x)
    return points_bs, points_x


def merged_noise_rel(groups: Sequence[Sequence[Cell]]) -> list[float] | None:
    """Relative standard deviation of each merged cell (the median of its repeats) from the
    rounds' CIs; None when a round has no CI (e.g. another profiler's)."""
    noise: list[float] = []
    for group in groups:
        # Without the clock-ramp correction's width: that error is shared, not noise.
        halves = [
            c.noise_ci_rel_half if c.noise_ci_rel_half is not None else c.ci_rel_half for c in group
        ]
        if any(h is None for h in halves):
            return None
        sds = [h / ROUND_CI_LEVEL_Z for h in halves if h is not None]
        # The median of n repeats is about as precise as their mean: sd / √n.
        noise.append(statistics.median(sds) / math.sqrt(len(sds)))
    return noise


def merged_ramp_shifts(groups: Sequence[Sequence[Cell]]) -> list[tuple[float, float]]:
    """Each merged cell's clock-ramp shift (low, high): its repeats' medians', as the merged
    cell's time is their median."""
    return [
        (
            statistics.median(c.ramp_shift_rel[0] for c in group),
            statistics.median(c.ramp_shift_rel[1] for c in group),
        )
        for group in groups
    ]


def loo_noise_sd_rel(
    noise_rel: Sequence[float], leverage: Sequence[float], loo_seconds: Sequence[float | None]
) -> list[float]:
    """Relative standard deviation of each cell's leave-one-out residual (cells whose LOO
    value exists): the cell's own noise, inflated by what the fit loses without it, since
    r/(1 − h) has variance σ²/(1 − h)."""
    return [
        sd / math.sqrt(1.0 - h)
        for sd, h, loo in zip(noise_rel, leverage, loo_seconds, strict=True)
        if loo is not None
    ]
