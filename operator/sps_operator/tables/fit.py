"""Fits of SPS tables from measured rounds (pure: numpy, no I/O).

* Diagonal: per batch_tokens, the median steps/s across repeats (as SGLang's profiler).
* Additive: T(bs, M) = bias + alpha(bs) + theta(M), solved by penalised least squares
  on piecewise-linear hat bases whose knots are the measured bs and M values — the
  same clamped-linear interpolation SGLang evaluates — with reference levels
  alpha(bs0) = theta(m0) = 0. A second-difference smoothness penalty, its weight
  chosen by generalised cross-validation, keeps the problem well-posed when there
  are fewer cells than knots. Residuals are weighted relatively (1/T²) because the
  planner cares about ratios of step times, not absolute milliseconds.
* `fit_additive_binned_reference`: the reference profiler's additive fit (one-hot bs,
  one-hot `round(M/64)*64` bins, every repeat a row) written independently, kept only
  to compare against in `bench/`.

The hat bases and the sparse design are in `tables/hatbasis.py`; what the cells' noise
leaves in the table (the noise part of the error bound) in `tables/bound.py`.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from sps_operator.api.kinds import TableKind
from sps_operator.tables import clockramp
from sps_operator.tables.bound import (
    band_points,
    loo_noise_sd_rel,
    merged_noise_rel,
    merged_ramp_shifts,
    ramp_band_rel,
    table_noise_band_rel,
    unsteady_shift_rel,
)
from sps_operator.tables.formats import (
    SpsAdditiveCostTable,
    SpsCostTable,
    SpsTable,
    SpsTableError,
    interp_clamped,
    profile_sps_table,
)
from sps_operator.tables.hatbasis import (
    FloatArray,
    SparseDesign,
    additive_design,
    second_difference,
)
from sps_operator.tables.quality import Cell, FitQuality, evaluate, leave_one_out_rel

# Minimum cells for an additive fit (as the reference: fewer cannot say anything about θ).
MIN_ADDITIVE_CELLS = 4
REFERENCE_M_BIN_WIDTH = 64
MAX_EDF_FRACTION = 0.5
# A cell with leverage this close to 1 decides its own parameter: leaving it out extrapolates.
MAX_LOO_LEVERAGE = 0.99
# The additive fit's bounds: knots per axis (more distinct bs or M values are thinned to
# this many, evenly spread; each smoothing weight costs O(knots³)) and distinct cells
# (building the normal equations is O(cells); beyond this the input is not a profile).
MAX_KNOTS_PER_AXIS = 128
MAX_ADDITIVE_CELLS = 20_000


@dataclass(frozen=True)
class FitResult:
    """A fitted table and how well it reproduces the cells it came from."""

    table: SpsTable
    quality: FitQuality
    kind: TableKind
    # Smoothing weight chosen by GCV (additive only).
    smoothing: float | None = None
    # The clock-ramp model the rounds were corrected with (`clockramp.RampModel.to_dict`).
    clock_ramp: dict[str, Any] | None = None


# --- rounds → cells --------------------------------------------------------------------------


def _round_field(round_: Mapping[str, Any], index: int, key: str) -> Any:
    if key not in round_:
        raise ValueError(f"round {index} has no {key!r} field; is this a rounds.jsonl line?")
    return round_[key]


def _optional_number(round_: Mapping[str, Any], index: int, key: str) -> float | None:
    value = round_.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"round {index} has {key}={value!r}; it must be a finite number.")
    return float(value)


def _ci_rel_half(round_: Mapping[str, Any], index: int) -> float | None:
    """Relative half-width of the round's CI of its median step time (None when absent)."""
    low = _optional_number(round_, index, "ci_low")
    high = _optional_number(round_, index, "ci_high")
    median = _optional_number(round_, index, "median_step_time")
    if low is None or high is None or median is None:
        return None
    if not (median > 0 and low <= median <= high):
        raise ValueError(
            f"round {index} has ci_low={low}, median_step_time={median}, ci_high={high}; the "
            "median must be positive and inside its CI."
        )
    return (high - low) / (2 * median)


def _ramp_parts(round_: Mapping[str, Any], index: int) -> tuple[float | None, tuple[float, float]]:
    """A round corrected for the clock ramp (`clockramp.correct_rounds`): the relative
    half-width of its CI before the correction widened it, and the relative shift of its
    median were the slow-down at the high or low end of the model's region. (None, (0, 0))
    for a round that was not corrected."""
    point = _optional_number(round_, index, "clock_factor")
    low = _optional_number(round_, index, "clock_factor_low")
    high = _optional_number(round_, index, "clock_factor_high")
    if point is None or low is None or high is None:
        return None, (0.0, 0.0)
    if not 0 < low <= point <= high:
        raise ValueError(
            f"round {index} has clock_factor_low={low}, clock_factor={point}, "
            f"clock_factor_high={high}; they must be positive and in that order."
        )
    median = float(round_["median_step_time"])
    raw_low = float(round_.get("ci_low", median)) * high / point
    raw_high = float(round_.get("ci_high", median)) * low / point
    noise_half = max(0.0, raw_high - raw_low) / (2 * median)
    return noise_half, (point / high - 1.0, point / low - 1.0)


def cells_from_rounds(rounds: Iterable[Mapping[str, Any]]) -> list[Cell]:
    """One `Cell` per measured round (bs per DP rank, batch_tokens, seconds per step)."""
    rounds = list(rounds)
    # Runs that measured on a clock ramp (their anchor too, which is not on the ramp itself
    # but can meet it again after an idle gap).
    ramp_runs = {r.get("clock_run") for r in rounds if r.get("clock_on_ramp") is True}
    cells: list[Cell] = []
    for index, round_ in enumerate(rounds):
        bs = int(_round_field(round_, index, "batch_size_per_rank"))
        m = int(_round_field(round_, index, "batch_tokens"))
        sps = float(_round_field(round_, index, "steps_per_sec"))
        if not (math.isfinite(sps) and sps > 0):
            raise ValueError(f"round {index} has steps_per_sec={sps}; it must be > 0.")
        tier = round_.get("graph_tier")
        ci_rel_half = _ci_rel_half(round_, index)
        noise_ci_rel_half, ramp_shift_rel = _ramp_parts(round_, index)
        dropped = _optional_number(round_, index, "dropped_drift_steps")
        cells.append(
            Cell(
                bs=bs,
                m=m,
                t=1.0 / sps,
                t_se=_optional_number(round_, index, "step_time_se") or 0.0,
                tier=int(tier) if tier is not None else None,
                ci_rel_half=ci_rel_half,
                noise_ci_rel_half=noise_ci_rel_half if ci_rel_half is not None else None,
                ramp_shift_rel=ramp_shift_rel,
                drift_dropped=(
                    dropped is not None and dropped > 0 and round_.get("clock_run") in ramp_runs
                ),
            )
        )
    return cells


# --- diagonal --------------------------------------------------------------------------------


ONE_PROBE_ADVICE = (
    "a diagonal table with a single probe is what SGLang builds when it has no table "
    "(`is_uninitialized_sps_table`: compact mode then verifies everything), so it would "
    "silently disable trimming; measure at least two batch sizes (--batch-size 1 8, or "
    "--max-batch-size 2 or more)"
)


def fit_diagonal(
    rounds: Sequence[Mapping[str, Any]],
    max_batch_tokens: int | None = None,
    tiers: Sequence[int] | None = None,
) -> FitResult:
    """Median steps/s per batch_tokens across repeats → `SpsCostTable`.

    With `tiers` (the captured graph sizes in tokens, b*K), the table is written as a
    staircase over every tier between the smallest and largest measured one: a step of
    M tokens replays the smallest tier >= M, so each tier's step time (linear in the tier
    between measured tiers) is put at the probe just above the previous tier, which is
    where SGLang's floor lookup switches. Without `tiers`: the measured probes only, as
    the reference profiler writes them. Refuses a single measured probe (`ONE_PROBE_ADVICE`).
    """
    diagonal = [r for r in rounds if r.get("frac") is None]
    if not diagonal:
        raise ValueError(
            "No diagonal rounds (frac=null) to fit a diagonal table; these rounds are "
            "off-diagonal — fit them as an Additive table."
        )
    cells = cells_from_rounds(diagonal)
    by_tokens: dict[int, list[float]] = {}
    bs_at: dict[int, int] = {}
    for c, round_ in zip(cells, diagonal, strict=True):
        by_tokens.setdefault(c.m, []).append(float(round_["steps_per_sec"]))
        bs_at.setdefault(c.m, c.bs)
    if len(by_tokens) < 2:
        raise ValueError(f"Only batch_tokens {sorted(by_tokens)} measured: {ONE_PROBE_ADVICE}.")
    probes = [(m, statistics.median(values)) for m, values in sorted(by_tokens.items())]

    def build(kept: Sequence[tuple[int, float]]) -> SpsCostTable:
        if tiers:
            return _diagonal_staircase(kept, sorted(set(tiers)), max_batch_tokens)
        return profile_sps_table(kept, max_batch_tokens=max_batch_tokens)

    def predict_without(index: int) -> float | None:
        if index in (0, len(probes) - 1):
            return None
        return build([p for i, p in enumerate(probes) if i != index]).step_seconds(probes[index][0])

    probe_cells = [Cell(bs=bs_at[m], m=m, t=1.0 / sps) for m, sps in probes]
    loo = leave_one_out_rel(probe_cells, predict_without) if len(probes) >= 3 else None
    table = build(probes)
    k = max(1, probes[0][0] // bs_at[probes[0][0]])
    unsteady_ms = {c.m for c in cells if c.drift_dropped}
    unsteady = 0.0
    if unsteady_ms:
        kept = [p for p in probes if p[0] not in unsteady_ms]
        grid = range(bs_at[probes[0][0]] * k, bs_at[probes[-1][0]] * k + 1, k)
        if len(kept) >= 2:
            without = build(kept)
            unsteady = max(
                abs(table.step_seconds(m) - without.step_seconds(m)) / table.step_seconds(m)
                for m in grid
            )
        else:
            # Fewer than two probes left: nothing is known without them, so the bound
            # takes the table's whole range (its largest fall to its fastest probe).
            fastest = min(1.0 / sps for _m, sps in probes)
            unsteady = max((table.step_seconds(m) - fastest) / table.step_seconds(m) for m in grid)
    quality = evaluate(
        table,
        cells,
        loo_rel=loo,
        probe_seconds=[1.0 / sps for _m, sps in probes],
        # A measured-probes table's floor steps are what LOO scores already.
        within_step_rel=_within_step_rel(table, k) if tiers else 0.0,
        unsteady_rel=unsteady,
    )
    return FitResult(table=table, quality=quality, kind=TableKind.DIAGONAL)


def _within_step_rel(table: SpsCostTable, k: int) -> float:
    """Largest relative height of a staircase step that holds several batch sizes.

    A step [e₀, e₁) of a diagonal table is looked up for every bs with bs·K in it; they all
    replay the same tier, but with fewer requests than the tier's full width they cost less
    than the value the table holds for it — by at most the step's height, since they cost no
    less than the previous step's full width.
    """
    edges = [*table.sample_batch_tokens, table.max_batch_tokens + 1]
    seconds = [1.0 / sps for sps in table.sample_steps_per_sec]
    heights = [0.0]
    for i in range(1, len(seconds)):
        grid_points = (edges[i + 1] - 1) // k - (edges[i] - 1) // k
        if grid_points > 1:
            heights.append((seconds[i] - seconds[i - 1]) / seconds[i - 1])
    return max(heights)


def _diagonal_staircase(
    probes: Sequence[tuple[int, float]], tiers: Sequence[int], max_batch_tokens: int | None
) -> SpsCostTable:
    # Step time per replayed tier (a measured M pads up to its tier).
    by_tier: dict[int, list[float]] = {}
    for m, sps in probes:
        tier = _tier_at(tiers, m)
        if tier is None:
            return profile_sps_table(probes, max_batch_tokens=max_batch_tokens)
        by_tier.setdefault(tier, []).append(1.0 / sps)
    measured = sorted(by_tier)
    seconds = [statistics.median(by_tier[t]) for t in measured]
    span = [t for t in tiers if measured[0] <= t <= measured[-1]]
    values = [interp_clamped(measured, seconds, float(t)) for t in span]
    edges = [span[0], *(t + 1 for t in span[:-1])]
    resolved_max = (
        int(max_batch_tokens) if max_batch_tokens is not None else max(span[-1], probes[-1][0])
    )
    return SpsCostTable(edges, [1.0 / v for v in values], resolved_max)


# --- additive: hat-basis penalised least squares ---------------------------------------------


def reduce_knots(values: Iterable[int], max_knots: int | None = None) -> list[int]:
    """The distinct values, or `max_knots` (default `MAX_KNOTS_PER_AXIS`) of them evenly
    spread (ends kept) when there are more."""
    max_knots = max_knots or MAX_KNOTS_PER_AXIS
    distinct = sorted(set(values))
    if len(distinct) <= max_knots:
        return distinct
    picks = np.unique(np.round(np.linspace(0, len(distinct) - 1, max_knots)).astype(int))
    return [distinct[i] for i in picks]


class _PenalisedSystem:
    """(G + λP)β = XᵀWy for many λ at O(knots³) once and O(knots² + cells) per λ.

    G + εI = LLᵀ (Cholesky, ε a whisker of ridge so knots that only the penalty ties down
    stay solvable) and L⁻¹PL⁻ᵀ = UDUᵀ, so (G + εI + λP)⁻¹ = L⁻ᵀU(I + λD)⁻¹UᵀL⁻¹ and the
    effective degrees of freedom tr((G + λP)⁻¹G) ≈ Σ 1/(1 + λd).
    """

    def __init__(
        self,
        design: SparseDesign,
        gram: FloatArray,
        xtwy: FloatArray,
        y: FloatArray,
        w: FloatArray,
        penalty_gram: FloatArray,
    ) -> None:
        self.design, self.y, self.w = design, y, w
        ridge = 1e-9 * (np.trace(gram) / max(gram.shape[0], 1))
        chol = np.linalg.cholesky(gram + ridge * np.eye(gram.shape[0]))
        chol_inv = np.linalg.inv(chol)
        d, u = np.linalg.eigh(chol_inv @ penalty_gram @ chol_inv.T)
        self.d = np.clip(d, 0.0, None)
        self.basis = chol_inv.T @ u  # L⁻ᵀU
        self.projected = self.basis.T @ xtwy  # UᵀL⁻¹XᵀWy

    def solve(self, lam: float) -> tuple[FloatArray, float, float]:
        """β, weighted RSS and effective degrees of freedom at λ."""
        shrink = 1.0 / (1.0 + lam * self.d)
        beta = self.basis @ (shrink * self.projected)
        resid = self.y - self.design.times(beta)
        return beta, float(np.sum(self.w * resid * resid)), float(np.sum(shrink))

    def inverse(self, lam: float) -> FloatArray:
        """(G + λP)⁻¹, for standard errors and leverages."""
        shrink = 1.0 / (1.0 + lam * self.d)
        return (self.basis * shrink) @ self.basis.T


def _tier_at(tiers: Sequence[int], m: int) -> int | None:
    for t in tiers:
        if t >= m:
            return t
    return None


def staircase_probes(
    tiers: Sequence[int], values: Sequence[float]
) -> tuple[list[int], list[float]]:
    """M probes and theta values that make clamped-linear interpolation a staircase.

    Every M in (t_{i-1}, t_i] replays graph tier t_i, so theta is constant there: a probe at
    t_{i-1}+1 and one at t_i carry the same value, and the jump happens between t_{i-1} and
    t_{i-1}+1, exactly where the server switches graphs.
    """
    m_probes: list[int] = []
    theta: list[float] = []
    previous: int | None = None
    for t, v in zip(tiers, values, strict=True):
        if previous is not None and t - previous > 1:
            m_probes.append(previous + 1)
            theta.append(v)
        m_probes.append(t)
        theta.append(v)
        previous = t
    return m_probes, theta


@dataclass(frozen=True)
class _PenalisedFit:
    bias: float
    bs_knots: list[int]
    alpha: list[float]
    x_knots: list[int]
    theta: list[float]
    smoothing: float
    probe_se_ms: dict[str, float]
    # Per cell: the fitted step time with that cell left out (None where it alone decides
    # a parameter, i.e. the fit without it would extrapolate).
    loo_seconds: list[float | None]
    # Per cell: its leverage h_ii (how much its own time decides its fitted value).
    leverage: list[float]
    # Half-width of the simultaneous band the cells' own measurement noise leaves in the
    # table (relative; None when a cell's noise is unknown).
    noise_band_rel: float | None = None
    # Largest relative error the clock-ramp correction's uncertainty leaves over the grid.
    ramp_band_rel: float = 0.0
    # Largest relative change over the grid when the cells whose rounds' start drifted are
    # left out.
    unsteady_rel: float = 0.0


def _fit_penalised(
    cells: Sequence[Cell],
    theta_x: Sequence[int],
    counts: Sequence[int],
    noise_rel: Sequence[float] | None = None,
    x_of: Callable[[int], int] | None = None,
    ramp_shifts: Sequence[tuple[float, float]] | None = None,
    unsteady: Sequence[bool] | None = None,
) -> _PenalisedFit:
    """bias + alpha(bs) + theta(x) on hat bases, x = M or the replayed tier; λ by GCV.

    `noise_rel`: each cell's relative standard deviation from its rounds' CIs, propagated
    through the fit to the table over the grid (`noise_band_rel`); `x_of` maps a verify
    token count M to θ's axis (the replayed tier, or M itself). `ramp_shifts`: each cell's
    relative shift at the ends of the clock-ramp model's region (`bound.ramp_band_rel`).
    `unsteady`: cells whose rounds' start drifted (`bound.unsteady_shift_rel`).

    Cost: O(cells) to build the normal equations, O(knots³) per smoothing weight tried.
    """
    bs_knots = reduce_knots(c.bs for c in cells)
    x_knots = reduce_knots(theta_x)
    design = additive_design([c.bs for c in cells], bs_knots, theta_x, x_knots)
    d_alpha = second_difference(bs_knots)[:, 1:]
    d_theta = second_difference(x_knots)[:, 1:]
    n_alpha = len(bs_knots) - 1
    penalty = np.zeros((d_alpha.shape[0] + d_theta.shape[0], design.width))
    penalty[: d_alpha.shape[0], 1 : 1 + n_alpha] = d_alpha
    penalty[d_alpha.shape[0] :, 1 + n_alpha :] = d_theta
    penalty_gram = penalty.T @ penalty
    y = np.array([c.t for c in cells], dtype=float)
    w = np.asarray(counts, dtype=float) / (y * y)
    n = len(cells)
    gram = design.gram(w)
    xtwy = design.transpose_times(w * y)
    scale = float(np.trace(gram)) / (float(np.trace(penalty_gram)) or 1.0)
    system = _PenalisedSystem(design, gram, xtwy, y, w, penalty_gram)
    candidates: list[tuple[float, float]] = []  # (gcv, λ)
    for lam in scale * np.logspace(-7, 4, 34):
        _beta, rss, edf = system.solve(float(lam))
        # GCV degenerates as the fit approaches interpolation (edf → n): keep at least
        # half the cells as residual degrees of freedom.
        if edf <= MAX_EDF_FRACTION * n:
            denom = n - edf
            candidates.append((n * rss / (denom * denom), float(lam)))
    lam = min(candidates)[1] if candidates else float(scale * 1e4)
    beta, rss, edf = system.solve(lam)
    a_inv = system.inverse(lam)
    # Parameter standard errors: σ² A⁻¹ XᵀWX A⁻¹ (σ² relative; W = 1/T² makes it seconds²).
    sigma2 = rss / max(n - edf, 1.0)
    se = np.sqrt(np.clip(np.diag(sigma2 * (a_inv @ gram @ a_inv)), 0.0, None)) * 1e3
    probe_se = {"bias": float(se[0])}
    for i, bs in enumerate(bs_knots[1:]):
        probe_se[f"bs={bs}"] = float(se[1 + i])
    for i, value in enumerate(x_knots[1:]):
        probe_se[f"x={value}"] = float(se[1 + n_alpha + i])
    # Leave-one-out at fixed λ without refitting: e_i = r_i / (1 − h_ii) for a linear smoother.
    leverage = w * design.quadratic(a_inv)
    resid = y - design.times(beta)
    loo_seconds = [
        float(y[i] - resid[i] / (1.0 - leverage[i])) if leverage[i] < MAX_LOO_LEVERAGE else None
        for i in range(n)
    ]
    noise_band_rel = None
    ramp_band = 0.0
    unsteady_band = 0.0
    if x_of is not None and (noise_rel is not None or ramp_shifts is not None):
        points_bs, points_x = band_points(cells, bs_knots, x_of)
        grid = additive_design(points_bs, bs_knots, points_x, x_knots)
        if noise_rel is not None:
            noise_band_rel = table_noise_band_rel(design, a_inv, w, y, noise_rel, beta, grid)
        if ramp_shifts is not None:
            ramp_band = ramp_band_rel(design, a_inv, w, y, ramp_shifts, beta, grid)
        if unsteady is not None and any(unsteady):
            kept_w = np.where(np.asarray(unsteady, dtype=bool), 0.0, w)
            unsteady_band = unsteady_shift_rel(design, kept_w, y, lam * penalty_gram, beta, grid)
    return _PenalisedFit(
        bias=float(beta[0]),
        bs_knots=bs_knots,
        alpha=[0.0, *(float(v) for v in beta[1 : 1 + n_alpha])],
        x_knots=x_knots,
        theta=[0.0, *(float(v) for v in beta[1 + n_alpha :])],
        smoothing=lam / scale,
        probe_se_ms=probe_se,
        loo_seconds=loo_seconds,
        leverage=[float(h) for h in leverage],
        noise_band_rel=noise_band_rel,
        ramp_band_rel=ramp_band,
        unsteady_rel=unsteady_band,
    )


def fit_additive_cells(
    cells: Sequence[Cell], tiers: Sequence[int] | None = None, use_tiers: bool = True
) -> FitResult:
    """Additive fit on cells (median per (bs, M) first, so repeats count once each).

    When every cell knows the graph tier the server replayed, theta is fitted as a smooth
    function of the tier (what the GPU runs) and written as a staircase over M — over every
    captured tier in `tiers` between the smallest and largest measured one when the capture
    list is known; otherwise theta's knots are the measured M values.
    """
    grouped: dict[tuple[int, int], list[Cell]] = {}
    for c in cells:
        grouped.setdefault((c.bs, c.m), []).append(c)
    merged = [
        Cell(bs=bs, m=m, t=statistics.median(g.t for g in group), tier=group[0].tier)
        for (bs, m), group in sorted(grouped.items())
    ]
    if len(merged) < MIN_ADDITIVE_CELLS:
        raise ValueError(
            f"An additive fit needs at least {MIN_ADDITIVE_CELLS} distinct (bs, M) cells, "
            f"got {len(merged)}; add batch sizes or --fracs."
        )
    if len(merged) > MAX_ADDITIVE_CELLS:
        raise ValueError(
            f"An additive fit takes at most {MAX_ADDITIVE_CELLS} distinct (bs, M) cells, got "
            f"{len(merged)}; a profile never needs that many: sweep fewer batch sizes or "
            "--fracs (repeats of a cell are merged and do not count)."
        )
    if tiers:
        # Cells measured without a recorded tier (e.g. by another profiler) in compact mode:
        # the server replays the smallest captured tier >= M.
        ordered = sorted(tiers)
        merged = [
            c if c.tier is not None else Cell(c.bs, c.m, c.t, c.t_se, _tier_at(ordered, c.m))
            for c in merged
        ]
    counts = [len(grouped[(c.bs, c.m)]) for c in merged]
    groups = [grouped[(c.bs, c.m)] for c in merged]
    noise_rel = merged_noise_rel(groups)
    ramp_shifts = merged_ramp_shifts(groups)
    by_tier = use_tiers and all(c.tier is not None and c.tier >= c.m for c in merged)
    theta_x = [int(c.tier) if by_tier and c.tier is not None else c.m for c in merged]
    ordered_tiers = sorted(tiers or [])

    def x_of(m: int) -> int:
        tier = _tier_at(ordered_tiers, m) if by_tier else None
        return m if tier is None else tier

    unsteady = [any(c.drift_dropped for c in group) for group in groups]
    fit = _fit_penalised(merged, theta_x, counts, noise_rel, x_of, ramp_shifts, unsteady)
    if not fit.bias > 0:
        raise ValueError(
            f"The additive fit gave bias_seconds={fit.bias:.6g} <= 0, which SGLang refuses; the "
            "cells do not look additive — inspect the rounds (plot) for outliers."
        )
    if by_tier:
        lo, hi = fit.x_knots[0], fit.x_knots[-1]
        stair = sorted({t for t in (tiers or []) if lo <= t <= hi} | set(fit.x_knots))
        values = [interp_clamped(fit.x_knots, fit.theta, float(t)) for t in stair]
        m_probes, theta = staircase_probes(stair, values)
    else:
        m_probes, theta = fit.x_knots, fit.theta
    table = SpsAdditiveCostTable(fit.bias, fit.bs_knots, fit.alpha, m_probes, theta)
    probe_se = {
        (k.replace("x=", "tier=" if by_tier else "M=")): v for k, v in fit.probe_se_ms.items()
    }
    quality = evaluate(
        table,
        list(cells),
        probe_se_ms=probe_se,
        loo_rel=leave_one_out_rel(merged, lambda i: fit.loo_seconds[i]),
        probe_seconds=[c.t for c in merged],
        noise_band_rel=fit.noise_band_rel,
        ramp_band_rel=fit.ramp_band_rel,
        unsteady_rel=fit.unsteady_rel,
        loo_noise_sd_rel=(
            None
            if noise_rel is None
            else loo_noise_sd_rel(noise_rel, fit.leverage, fit.loo_seconds)
        ),
    )
    return FitResult(table=table, quality=quality, kind=TableKind.ADDITIVE, smoothing=fit.smoothing)


def _tiers_from_rounds(rounds: Sequence[Mapping[str, Any]]) -> list[int] | None:
    for round_ in rounds:
        tiers = round_.get("graph_tiers")
        if tiers:
            return [int(t) for t in tiers]
    return None


def fit_additive(
    rounds: Sequence[Mapping[str, Any]], tiers: Sequence[int] | None = None
) -> FitResult:
    """Additive fit from rounds (diagonal rounds count as cells at M = bs*K).

    `tiers` (the compact-mode capture tiers) defaults to a round's `graph_tiers` field.
    """
    if tiers is None:
        tiers = _tiers_from_rounds(rounds)
    return fit_additive_cells(cells_from_rounds(rounds), tiers=tiers)


def fit_from_rounds(
    rounds: Sequence[Mapping[str, Any]],
    kind: TableKind = TableKind.DIAGONAL,
    max_batch_tokens: int | None = None,
    tiers: Sequence[int] | None = None,
    diagonal_probes: Literal["tiers", "measured"] = "tiers",
) -> FitResult:
    """Fit a table of `kind` from rounds.jsonl dicts as measured; raises ValueError with
    what to do. A run whose sweep began on a live clock ramp: its rounds' medians carry the
    ramp's slow-down, taken out first (`clockramp.usable_rounds`, its uncertainty added to
    their CIs); rounds on a ramp nothing can correct are left out. The operator's judgement
    corrects once itself and calls `fit_corrected_rounds`."""
    usable, ramp = clockramp.usable_rounds(rounds)
    return fit_corrected_rounds(
        usable,
        ramp,
        kind=kind,
        max_batch_tokens=max_batch_tokens,
        tiers=tiers,
        diagonal_probes=diagonal_probes,
    )


def fit_corrected_rounds(
    rounds: Sequence[Mapping[str, Any]],
    clock_ramp: clockramp.RampModel | None,
    kind: TableKind = TableKind.DIAGONAL,
    max_batch_tokens: int | None = None,
    tiers: Sequence[int] | None = None,
    diagonal_probes: Literal["tiers", "measured"] = "tiers",
) -> FitResult:
    """Fit a table of `kind` from rounds already corrected for the clock ramp (the usable
    rounds of `clockramp.usable_rounds`), recording `clock_ramp`, the model they were
    corrected with. `tiers` default to the rounds' `graph_tiers`.
    `diagonal_probes="measured"` writes only the measured diagonal probes (exactly the
    reference profiler's table)."""
    if not rounds:
        raise ValueError("No rounds to fit; run the profiler first.")
    try:
        if kind == TableKind.DIAGONAL:
            if tiers is None and diagonal_probes == "tiers":
                tiers = _tiers_from_rounds(rounds)
            if diagonal_probes == "measured":
                tiers = None
            result = fit_diagonal(rounds, max_batch_tokens=max_batch_tokens, tiers=tiers)
        elif kind == TableKind.ADDITIVE:
            result = fit_additive(rounds, tiers=tiers)
        else:
            raise ValueError(f"kind must be a TableKind, got {kind!r}.")
    except SpsTableError as exc:
        raise ValueError(f"The fitted table is not valid for SGLang: {exc}") from exc
    if clock_ramp is None:
        return result
    return dataclasses.replace(result, clock_ramp=clock_ramp.to_dict())


# --- the reference profiler's additive fit, for comparison only -------------------------------


def reference_m_bin(m: int, width: int = REFERENCE_M_BIN_WIDTH) -> int:
    """`round(M/width)*width` with Python's banker's rounding, as the reference bins M."""
    return round(m / width) * width


def fit_additive_binned_reference(
    cells: Sequence[Cell], m_bin_width: int = REFERENCE_M_BIN_WIDTH
) -> FitResult:
    """The reference algorithm: OLS, one-hot bs, one-hot M bins, every repeat a row."""
    if len(cells) < MIN_ADDITIVE_CELLS:
        raise ValueError(f"Off-diagonal fit needs at least 4 cells, got {len(cells)}.")
    bs_levels = sorted({c.bs for c in cells})
    bins = sorted({reference_m_bin(c.m, m_bin_width) for c in cells})
    bs_col = {b: i for i, b in enumerate(bs_levels[1:])}
    bin_col = {m: i for i, m in enumerate(bins[1:])}
    design = np.zeros((len(cells), 1 + len(bs_col) + len(bin_col)))
    y = np.array([c.t for c in cells], dtype=float)
    for row, c in enumerate(cells):
        design[row, 0] = 1.0
        if c.bs in bs_col:
            design[row, 1 + bs_col[c.bs]] = 1.0
        mb = reference_m_bin(c.m, m_bin_width)
        if mb in bin_col:
            design[row, 1 + len(bs_col) + bin_col[mb]] = 1.0
    beta, *_ = np.linalg.lstsq(design, y, rcond=None)
    alpha = [0.0, *(float(beta[1 + bs_col[b]]) for b in bs_levels[1:])]
    theta = [0.0, *(float(beta[1 + len(bs_col) + bin_col[m]]) for m in bins[1:])]
    table = SpsAdditiveCostTable(float(beta[0]), bs_levels, alpha, bins, theta)
    return FitResult(table=table, quality=evaluate(table, list(cells)), kind=TableKind.ADDITIVE)
