"""Whether a run's measurement becomes a table that may go live (pure).

The rounds come from a Job that runs the user's image: `api.result.read_result` already
checked every field against the physical bounds; here the measurement is checked as a
whole (it is the sweep that was asked for, more tokens are not faster), fitted under a
cost bound, the table self-checked over its whole domain and gated. Every refusal names
what is wrong and what to do; a refused table is kept for inspection, never rolled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sps_operator.api.hashing import content_hash
from sps_operator.api.limits import MAX_SWEEP_CELLS
from sps_operator.api.models import DEFAULT_ADDITIVE_FRACS, FitQuality, SpsProfileSpec
from sps_operator.controller.bounded import BoundExceeded, CallFailed, call_bounded
from sps_operator.controller.gates import check_gates
from sps_operator.tables.clockramp import usable_rounds
from sps_operator.tables.fit import FitResult, fit_from_rounds
from sps_operator.tables.formats import SpsTable
from sps_operator.tables.selfcheck import doubtful_cells, self_check

if TYPE_CHECKING:
    from sps_operator.controller.state import Settings

# The fit's cost grows with the distinct cells: at most a sweep's cells, twice for an
# Additive run (its diagonal phase, then its off-diagonal one).
MAX_FIT_CELLS = 2 * MAX_SWEEP_CELLS
FRAC_TOLERANCE = 1e-6

# Refusal reasons (CamelCase: conditions and events).
SWEEP_MISMATCH = "SweepMismatch"
DOUBTFUL = "DoubtfulMeasurement"
FIT_FAILED = "FitFailed"
SELF_CHECK = "SelfCheckFailed"


@dataclass(frozen=True)
class Verdict:
    """A fitted table and whether it may go live (`reason` is None when it may)."""

    reason: str | None
    message: str
    fit: FitResult | None = None
    table_json: str | None = None

    @property
    def accepted(self) -> bool:
        return self.reason is None and self.fit is not None

    @property
    def table(self) -> SpsTable | None:
        return self.fit.table if self.fit is not None else None

    @property
    def table_hash(self) -> str | None:
        return content_hash(self.table_json) if self.table_json is not None else None


def _finite(value: float | None, digits: int = 6) -> float | None:
    return round(value, digits) if value is not None and math.isfinite(value) else None


def api_quality(fit: FitResult) -> FitQuality:
    """The fit's quality as status reports it (finite numbers only)."""
    q = fit.quality
    worst = abs(q.worst_cell.rel_error) if q.worst_cell is not None else None
    return FitQuality(
        rms_ms=_finite(q.rms_ms),
        r2=_finite(q.r2),
        max_rel_err=_finite(worst),
        loo_rel_rms=_finite(q.loo_rel_rms),
        loo_rel_max=_finite(q.loo_rel_max),
        ci_rel_max=_finite(q.ci_rel_max),
        error_bound_rel=_finite(q.error_bound_rel),
    )


def sweep_problems(
    rounds: Sequence[Mapping[str, Any]], spec: SpsProfileSpec, additive: bool
) -> list[str]:
    """Rounds the sweep did not ask for: a Job that measured something else (or lies)."""
    sweep = spec.table.sweep
    problems: dict[str, None] = {}  # ordered, without repeats
    cells = {(r["batch_size_per_rank"], r["batch_tokens"], r.get("frac")) for r in rounds}
    if len(cells) > MAX_FIT_CELLS:
        problems[f"{len(cells)} distinct cells; at most {MAX_FIT_CELLS} are fitted"] = None
    for r in rounds:
        bs, frac, repeat = r["batch_size_per_rank"], r.get("frac"), r.get("repeat", 0)
        if sweep.batch_sizes and bs not in sweep.batch_sizes:
            problems[f"batch size {bs} is not in spec.table.sweep.batchSizes"] = None
        if sweep.max_batch_size and bs > sweep.max_batch_size:
            problems[f"batch size {bs} exceeds spec.table.sweep.maxBatchSize"] = None
        if repeat >= sweep.repeats:
            problems[f"repeat {repeat} but spec.table.sweep.repeats is {sweep.repeats}"] = None
        if frac is not None:
            allowed = sweep.fracs or DEFAULT_ADDITIVE_FRACS
            if not additive or not any(abs(frac - f) <= FRAC_TOLERANCE for f in allowed):
                problems[f"fraction {frac} was not asked for"] = None
        if len(problems) >= 3:
            break
    return list(problems)


def judge(
    rounds: Sequence[Mapping[str, Any]],
    spec: SpsProfileSpec,
    *,
    additive: bool,
    live: SpsTable | None = None,
    gate: bool = True,
) -> Verdict:
    """Check, fit, self-check and (with `gate`) gate the validated rounds of a run."""
    problems = sweep_problems(rounds, spec, additive)
    if problems:
        return Verdict(
            SWEEP_MISMATCH,
            "the profiler's rounds do not match the sweep this profile asked for: "
            + "; ".join(problems)
            + " (a Job image that is not sps-profiler, or a spec changed mid-run)",
        )
    try:
        # Judged as fitted: without rounds nothing can correct, and corrected for a clock ramp.
        usable, _ramp = usable_rounds(rounds)
    except ValueError as exc:
        return Verdict(FIT_FAILED, f"the rounds cannot be fitted into a table: {exc}")
    doubtful = doubtful_cells(usable)
    if doubtful:
        return Verdict(
            DOUBTFUL,
            "the measurement is not plausible: "
            + "; ".join(doubtful[:3])
            + ". Re-profile on an idle GPU (kubectl sps reprofile), or raise sweep.repeats",
        )
    try:
        fit = fit_from_rounds(list(rounds), kind="additive" if additive else "diagonal")
    except (ValueError, ArithmeticError) as exc:
        return Verdict(FIT_FAILED, f"the rounds cannot be fitted into a table: {exc}")
    problems = self_check(fit.table)
    table_json = None if problems else fit.table.to_json()
    if problems:
        return Verdict(
            SELF_CHECK,
            "the fitted table fails its self-check: " + "; ".join(problems[:3]),
            fit,
        )
    if gate:
        verdict = check_gates(spec.gates, api_quality(fit), fit.table, live)
        if not verdict.passed:
            return Verdict(verdict.reason, verdict.message, fit, table_json)
    return Verdict(None, "accepted", fit, table_json)


def _judge(
    rounds: list[Mapping[str, Any]],
    spec: SpsProfileSpec,
    additive: bool,
    live: SpsTable | None,
    gate: bool,
) -> Verdict:
    return judge(rounds, spec, additive=additive, live=live, gate=gate)


def judge_bounded(
    rounds: Sequence[Mapping[str, Any]],
    spec: SpsProfileSpec,
    *,
    additive: bool,
    live: SpsTable | None = None,
    gate: bool = True,
    limits: Settings | None = None,
) -> Verdict:
    """`judge` in a child process bounded in time and memory (`limits`), or in-process
    when `limits` is None or says not to isolate."""
    if limits is None or not limits.isolate_fits:
        return judge(rounds, spec, additive=additive, live=live, gate=gate)
    try:
        return call_bounded(
            _judge,
            list(rounds),
            spec,
            additive,
            live,
            gate,
            seconds=limits.fit_seconds,
            memory_bytes=limits.fit_memory_mib * 2**20,
        )
    except BoundExceeded as exc:
        return Verdict(
            FIT_FAILED,
            f"the fit of {len(rounds)} rounds {exc}; measure fewer cells "
            "(spec.table.sweep), or raise the operator's fit limits",
        )
    except CallFailed as exc:
        return Verdict(FIT_FAILED, f"the fit failed: {exc}")
