"""Acceptance gates a fitted table must pass before it goes live (pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from sps_operator.api.reasons import (
    CHANGE_GATE_FAILED,
    ERROR_BOUND_GATE_FAILED,
    FIT_QUALITY_GATE_FAILED,
)
from sps_operator.api.spec import GatesSpec
from sps_operator.api.status import FitQuality
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable, SpsTable


@dataclass(frozen=True)
class GateResult:
    passed: bool
    reason: str  # CamelCase, for conditions and events
    message: str


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def relative_change(new: SpsTable, live: SpsTable) -> float | None:
    """Largest relative difference of the step time at the new table's probes;
    None when the tables are of different kinds (not comparable)."""
    if isinstance(new, SpsCostTable) and isinstance(live, SpsCostTable):
        worst = 0.0
        for m in new.sample_batch_tokens:
            a, b = new.lookup(m), live.lookup(m)
            worst = max(worst, abs(a - b) / max(abs(b), 1e-12))
        return worst
    if isinstance(new, SpsAdditiveCostTable) and isinstance(live, SpsAdditiveCostTable):
        worst = 0.0
        for bs in new.bs_probes:
            for m in new.m_probes:
                budget = max(m - bs, 0)
                a = new.step_time(num_reqs=bs, budget=budget)
                b = live.step_time(num_reqs=bs, budget=budget)
                worst = max(worst, abs(a - b) / max(abs(b), 1e-12))
        return worst
    return None


def check_gates(
    gates: GatesSpec, quality: FitQuality, new: SpsTable, live: SpsTable | None
) -> GateResult:
    if gates.max_error_bound is not None:
        bound = quality.error_bound_rel
        if bound is None or not math.isfinite(bound) or bound > gates.max_error_bound:
            shown = "unknown" if bound is None else f"{bound:.1%}"
            return GateResult(
                False,
                ERROR_BOUND_GATE_FAILED,
                f"the table's predicted error bound {shown} exceeds gates.maxErrorBound "
                f"{gates.max_error_bound:.1%} (leave-one-out error "
                f"{_pct(quality.loo_rel_max)}, widest round CI {_pct(quality.ci_rel_max)}): "
                "measure more batch sizes (sweep.batchSizes / maxBatchSize), tighten "
                "sweep.ciRelWidth, or relax the gate",
            )
    rms = quality.rms_ms
    if (
        gates.max_rms_ms is not None
        and rms is not None
        and (not math.isfinite(rms) or rms > gates.max_rms_ms)
    ):
        return GateResult(
            False,
            FIT_QUALITY_GATE_FAILED,
            f"fit RMS error {quality.rms_ms:.3f} ms exceeds gates.maxRmsMs "
            f"{gates.max_rms_ms:g} ms; the measurement is too noisy (raise sweep.repeats, "
            "tighten sweep.ciRelWidth, or relax the gate)",
        )
    if gates.min_r2 is not None:
        r2 = quality.r2
        if r2 is None or not math.isfinite(r2) or r2 < gates.min_r2:
            shown = "undefined" if r2 is None or not math.isfinite(r2) else f"{r2:.4f}"
            return GateResult(
                False,
                FIT_QUALITY_GATE_FAILED,
                f"fit R² {shown} is below gates.minR2 {gates.min_r2:g}",
            )
    if gates.max_change is not None and live is not None:
        change = relative_change(new, live)
        if change is not None and change > gates.max_change:
            return GateResult(
                False,
                CHANGE_GATE_FAILED,
                f"the new table differs from the live one by up to {change:.1%}, more than "
                f"gates.maxChange {gates.max_change:.1%}; check the hardware, or raise the gate",
            )
    return GateResult(True, "GatesPassed", "all acceptance gates passed")
