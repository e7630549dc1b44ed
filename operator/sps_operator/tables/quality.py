"""Fit quality of an SPS table against the cells it was fitted from (pure, no I/O).

Numbers reported: RMS of the step-time residual in ms, RMS relative residual, R²,
a per-probe standard error, and the worst cell. They go into the manifest and the
operator's acceptance gates, never into the table itself.

Residuals alone cannot fail: a diagonal table passes through its medians (RMS 0, R² 1
with one repeat). So every table also gets figures that predict its error against the
truth over the whole grid the planner reads:

* leave-one-out (LOO) interpolation error at the probes: refit without a probe and read
  the table there; it measures what the table does between probes, where the planner
  reads values nobody measured;
* each round's confidence interval of its median step time (the stopping rule's), the
  measurement error at the probes;
* `error_bound_rel`, one figure from both, bounding |table − truth| / truth over the grid.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable, SpsTable


@dataclass(frozen=True)
class Cell:
    """One measured step time: `bs` requests per DP rank, `m` verify tokens, `t` seconds."""

    bs: int
    m: int
    t: float
    # Standard error of `t` from the round itself (0 when unknown).
    t_se: float = 0.0
    # CUDA-graph tier the server replayed (observed num_verify_tokens), when known.
    tier: int | None = None
    # Half-width of the round's confidence interval of its median, relative to `t`.
    ci_rel_half: float | None = None
    # A round corrected for the clock ramp: its CI before the correction's uncertainty was
    # added (relative half-width), and where `t` would be (relative shift, low ≤ 0 ≤ high)
    # were the slow-down at the high or the low end of the ramp model's region. That error
    # is one (A, τ) for every round of the run, so the fit sees it as a shared shift, not as
    # independent noise (`bound.ramp_band_rel`).
    noise_ci_rel_half: float | None = None
    ramp_shift_rel: tuple[float, float] = (0.0, 0.0)
    # A round of a run on a clock ramp whose drift test dropped its first steps (its level
    # was still falling when it began: the ramp re-armed by an idle gap, or one the model
    # does not describe): what it kept may still be falling, beyond what its CI says (the
    # bench's clock-ramp cells: 56 of 76 such rounds off by more than their CI). Off a
    # ramp such drops are noise (2 of 57 outside their CI) and this stays False.
    drift_dropped: bool = False


@dataclass(frozen=True)
class WorstCell:
    bs: int
    m: int
    measured_ms: float
    fitted_ms: float
    rel_error: float


@dataclass(frozen=True)
class FitQuality:
    """How well a table reproduces its cells."""

    num_cells: int
    rms_ms: float
    rms_rel: float
    r2: float
    worst_cell: WorstCell | None
    # Probe name ("bs=8", "M=64", "batch_tokens=64") → standard error in ms.
    probe_se_ms: dict[str, float] = field(default_factory=dict)
    # RMS and largest absolute relative leave-one-out interpolation error over the probes
    # (None with fewer than 3 probes: nothing to interpolate between).
    loo_rel_rms: float | None = None
    loo_rel_max: float | None = None
    # Largest relative half-width of a round's CI of its median step time (None when the
    # rounds carry no CI, e.g. another profiler's).
    ci_rel_max: float | None = None
    # Predicted bound on |table − truth| / truth over the planner's whole grid.
    error_bound_rel: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        # JSON has no NaN: R² of a constant target is undefined.
        if not math.isfinite(self.r2):
            data["r2"] = None
        return data


# The z of a round's CI of its median (95 %, two-sided); the profiler's stopping rule uses it.
ROUND_CI_LEVEL_Z = 1.96
# The error bound holds for the whole grid at once with this probability (when the rounds'
# CIs are honest): each probe's CI is widened to this family-wise level (Bonferroni).
BOUND_COVERAGE = 0.95


def leave_one_out_rel(
    probes: Sequence[Cell], predict_without: Callable[[int], float | None]
) -> list[float]:
    """Relative error at each probe of the table fitted without that probe.

    `predict_without(i)` is the step time the fit gives at `probes[i]` when probe i is left
    out, or None where that would extrapolate (an end probe): the planner never reads a
    table beyond its measured range, so only interpolation is scored.
    """
    errors: list[float] = []
    for index, probe in enumerate(probes):
        predicted = predict_without(index)
        if predicted is not None:
            errors.append((predicted - probe.t) / probe.t)
    return errors


def _family_z(num_probes: int) -> float:
    tail = (1.0 - BOUND_COVERAGE) / (2 * max(num_probes, 1))
    return statistics.NormalDist().inv_cdf(1.0 - tail)


def error_bound_rel(
    *,
    loo_rel_max: float | None,
    ci_rel_max: float | None,
    num_probes: int,
    probe_seconds: Sequence[float],
    within_step_rel: float = 0.0,
    loo_rel: Sequence[float] | None = None,
    noise_band_rel: float | None = None,
    loo_noise_sd_rel: Sequence[float] | None = None,
    ramp_band_rel: float = 0.0,
    unsteady_rel: float = 0.0,
) -> float:
    """One figure bounding |table − truth| / truth over the grid.

    With the fit's own propagation of the cells' noise (`noise_band_rel`: the largest
    relative standard deviation the noise leaves in the table, and `loo_noise_sd_rel`: the
    part of each leave-one-out error, `loo_rel`, that is noise) the bound is
    `_fitted_bound`, its noise band combined (root sum of squares) with `ramp_band_rel`,
    what the clock-ramp correction's uncertainty leaves (one error shared by the corrected
    rounds, so not part of the noise band), plus `unsteady_rel`, how far the table moves
    without the rounds of a ramp run whose start still fell; otherwise the cruder one
    below (plus `unsteady_rel` too).

    Three ways the table can be wrong. At a probe, by the measurement: its CI, widened so
    all probes are covered at once. Between probes, by interpolation: leave-one-out measures
    it over twice the spacing the table really interpolates across (erring on the safe side
    for a curved truth, and including the neighbours' noise); without LOO (two probes)
    nothing is known between them but that the truth lies near the probes, so the largest
    relative step between neighbouring probes stands in. Inside one step of a table that
    holds one value for several grid points (`within_step_rel`, from the fit): the truth
    moves across the step, by at most the step's height when costs rise with load.
    """
    if noise_band_rel is not None and loo_rel is not None and loo_noise_sd_rel is not None:
        # Two independent errors, each at 95 %: the cells' noise and the run's one (A, τ).
        noise = math.hypot(noise_band_rel, ramp_band_rel)
        bound = _fitted_bound(noise, loo_rel, loo_noise_sd_rel)
        return _finite_bound(bound + unsteady_rel + within_step_rel)
    noise = 0.0 if ci_rel_max is None else ci_rel_max * _family_z(num_probes) / ROUND_CI_LEVEL_Z
    if loo_rel_max is not None:
        between = loo_rel_max
    else:
        ordered = list(probe_seconds)
        between = max(
            (abs(b - a) / min(a, b) for a, b in itertools.pairwise(ordered)),
            default=0.0,
        )
    return _finite_bound(max(noise, between) + within_step_rel + unsteady_rel)


def _finite_bound(bound: float) -> float:
    if not math.isfinite(bound):
        raise ValueError(f"fit quality: error bound is {bound}; the cells hold non-finite times.")
    return bound


def _fitted_bound(
    noise_band_rel: float, loo_rel: Sequence[float], loo_noise_sd_rel: Sequence[float]
) -> float:
    """The table's noise band plus the bias its shape or a bad cell leaves.

    Noise: `noise_band_rel`, the fit's simultaneous band. Bias: what the leave-one-out
    errors hold beyond their noise, two ways. Pooled over the probes (a mean square), for a
    shape the table cannot follow everywhere a little; and per probe beyond what its noise
    explains at the family-wise z, for one cell far off (a round measured on a clock ramp
    the model did not take out): pooled, 36 cells dilute it, and the bound understated
    such a table by half on the bench. Leave-one-out judges a gap twice as wide as the
    table interpolates across, so this errs on the safe side for a curved truth.
    """
    if len(loo_rel) != len(loo_noise_sd_rel):
        raise ValueError("fit quality: one noise figure per leave-one-out error is needed.")
    if not loo_rel:
        return noise_band_rel
    pairs = list(zip(loo_rel, loo_noise_sd_rel, strict=True))
    # Not calibrated down by the leave-one-out errors when the rounds' CIs err wide: on the
    # bench matrix that cost more coverage (10 % noise with outliers or KV growth) than it
    # gained in tightness.
    pooled = math.sqrt(max(0.0, statistics.fmean(e * e - sd * sd for e, sd in pairs)))
    z = _family_z(len(pairs))
    one_cell = max(abs(e) - z * sd for e, sd in pairs)
    return noise_band_rel + max(pooled, one_cell)


def predicted_step_seconds(table: SpsTable, bs: int, m: int) -> float:
    """The step time the planner infers from `table` at (bs, M)."""
    if isinstance(table, SpsAdditiveCostTable):
        return table.step_seconds_at(bs, m)
    return table.step_seconds(m)


def _group_se_ms(residuals: Sequence[float]) -> float:
    if len(residuals) < 2:
        return 0.0
    return statistics.pstdev(residuals) / math.sqrt(len(residuals)) * 1e3


def evaluate(
    table: SpsTable,
    cells: Sequence[Cell],
    probe_se_ms: dict[str, float] | None = None,
    *,
    loo_rel: Sequence[float] | None = None,
    probe_seconds: Sequence[float] = (),
    within_step_rel: float = 0.0,
    noise_band_rel: float | None = None,
    loo_noise_sd_rel: Sequence[float] | None = None,
    ramp_band_rel: float = 0.0,
    unsteady_rel: float = 0.0,
) -> FitQuality:
    """Residual statistics of `table` over `cells`, and its predicted error against truth.

    `probe_se_ms` may come from the fit (parameter standard errors); when absent it is
    estimated per probe from the residual spread of the cells at that probe. `loo_rel` are
    the fit's leave-one-out errors (`leave_one_out_rel`), None with fewer than 3 probes;
    `probe_seconds` the probes' step times in probe order (for the bound without LOO);
    `within_step_rel` what a table step holding several grid points may be off inside it.
    """
    if not cells:
        raise ValueError("fit quality needs at least one measured cell.")
    fitted = [predicted_step_seconds(table, c.bs, c.m) for c in cells]
    residuals = [c.t - f for c, f in zip(cells, fitted, strict=True)]
    rel = [r / c.t for r, c in zip(residuals, cells, strict=True)]
    rms = math.sqrt(sum(r * r for r in residuals) / len(residuals))
    rms_rel = math.sqrt(sum(x * x for x in rel) / len(rel))
    mean_t = statistics.fmean(c.t for c in cells)
    ss_tot = sum((c.t - mean_t) ** 2 for c in cells)
    ss_res = sum(r * r for r in residuals)
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else math.nan
    worst_index = max(range(len(cells)), key=lambda i: abs(rel[i]))
    worst = cells[worst_index]
    worst_cell = WorstCell(
        bs=worst.bs,
        m=worst.m,
        measured_ms=worst.t * 1e3,
        fitted_ms=fitted[worst_index] * 1e3,
        rel_error=rel[worst_index],
    )
    if probe_se_ms is None:
        probe_se_ms = {}
        if isinstance(table, SpsCostTable):
            for probe in table.sample_batch_tokens:
                group = [r for r, c in zip(residuals, cells, strict=True) if c.m == probe]
                ses = [c.t_se for c in cells if c.m == probe]
                spread = _group_se_ms(group)
                within = math.sqrt(sum(s * s for s in ses)) / max(len(ses), 1) * 1e3
                probe_se_ms[f"batch_tokens={probe}"] = max(spread, within)
        else:
            for bs in table.bs_probes:
                group = [r for r, c in zip(residuals, cells, strict=True) if c.bs == bs]
                probe_se_ms[f"bs={bs}"] = _group_se_ms(group)
    loo_rms = math.sqrt(statistics.fmean(e * e for e in loo_rel)) if loo_rel else None
    loo_max = max(abs(e) for e in loo_rel) if loo_rel else None
    ci_halves = [c.ci_rel_half for c in cells if c.ci_rel_half is not None]
    ci_max = max(ci_halves) if ci_halves else None
    return FitQuality(
        num_cells=len(cells),
        rms_ms=rms * 1e3,
        rms_rel=rms_rel,
        r2=r2,
        worst_cell=worst_cell,
        probe_se_ms=dict(probe_se_ms),
        loo_rel_rms=loo_rms,
        loo_rel_max=loo_max,
        ci_rel_max=ci_max,
        error_bound_rel=error_bound_rel(
            loo_rel_max=loo_max,
            ci_rel_max=ci_max,
            num_probes=len(cells),
            probe_seconds=probe_seconds,
            within_step_rel=within_step_rel,
            loo_rel=loo_rel,
            noise_band_rel=noise_band_rel,
            loo_noise_sd_rel=loo_noise_sd_rel,
            ramp_band_rel=ramp_band_rel,
            unsteady_rel=unsteady_rel,
        ),
    )
