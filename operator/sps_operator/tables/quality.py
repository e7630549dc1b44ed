"""Fit quality of an SPS table against the cells it was fitted from (pure, no I/O).

Numbers reported: RMS of the step-time residual in ms, RMS relative residual, R²,
a per-probe standard error, and the worst cell. They go into the manifest and the
operator's acceptance gates, never into the table itself.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
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

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        # JSON has no NaN: R² of a constant target is undefined.
        if not math.isfinite(self.r2):
            data["r2"] = None
        return data


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
    table: SpsTable, cells: Sequence[Cell], probe_se_ms: dict[str, float] | None = None
) -> FitQuality:
    """Residual statistics of `table` over `cells`.

    `probe_se_ms` may come from the fit (parameter standard errors); when absent it is
    estimated per probe from the residual spread of the cells at that probe.
    """
    if not cells:
        return FitQuality(0, math.nan, math.nan, math.nan, None, {})
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
    return FitQuality(
        num_cells=len(cells),
        rms_ms=rms * 1e3,
        rms_rel=rms_rel,
        r2=r2,
        worst_cell=worst_cell,
        probe_se_ms=dict(probe_se_ms),
    )
