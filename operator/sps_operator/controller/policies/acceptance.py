"""Whether a run's measurement becomes a table that may go live (pure).

The rounds come from a Job that runs the user's image: `api.result.read_result` already
checked every field against the physical bounds; here the measurement is checked as a
whole (it is the sweep that was asked for: nothing else, each cell once, every cell; more
tokens are not faster), fitted under a cost bound, the table self-checked over its whole
domain and gated. Every refusal names what is wrong and what to do; a refused table is kept
for inspection, never rolled. The judgement is a chain of named links (`JUDGEMENT_CHAIN`),
in the order a round goes from the Job's result to a table that may go live: sweep match,
clock-ramp models, coverage, ramp correction (once), plausibility, fit, self-check, gates.

Coverage is defined against what sps-profiler measures for the spec's sweep (`asked_cells`):
every (repeat, batch size, fraction) once. It never leaves a cell out on its own: a batch
size above the server's caps (`--max-running-requests`, the CUDA-graph max bs, the KV
capacity) fails the whole run before anything is measured (`profiler.server_info.validate_sweep`),
and a round that fails fails the run. The one round a fit legitimately drops is one
stranded on a clock ramp it cannot correct (`tables.clockramp.stranded_rounds`); it covers
nothing, and the cell counts only when measured again (so a stranded round and its
re-measurement are not duplicates).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sps_operator.api.hashing import content_hash
from sps_operator.api.kinds import TableKind
from sps_operator.api.limits import DEFAULT_MAX_BATCH_SIZE, MAX_SWEEP_CELLS, tapered_sweep
from sps_operator.api.reasons import (
    DOUBTFUL_MEASUREMENT,
    FIT_FAILED,
    INCOMPLETE_SWEEP,
    SELF_CHECK_FAILED,
    SWEEP_MISMATCH,
)
from sps_operator.api.spec import DEFAULT_ADDITIVE_FRACS, SpsProfileSpec, SweepSpec
from sps_operator.api.status import FitQuality
from sps_operator.controller.policies.gates import check_gates
from sps_operator.tables.clockramp import (
    RampModel,
    RunRamp,
    ramps_by_run,
    stranded_rounds,
    usable_rounds,
)
from sps_operator.tables.fit import FitResult, fit_corrected_rounds
from sps_operator.tables.formats import SpsTable
from sps_operator.tables.selfcheck import doubtful_cells, self_check

# The fit's cost grows with the distinct cells: at most a sweep's cells, twice for an
# Additive run (its diagonal phase, then its off-diagonal one).
MAX_FIT_CELLS = 2 * MAX_SWEEP_CELLS
FRAC_TOLERANCE = 1e-6
# Cells named in a refusal; the rest are counted.
MAX_CELLS_NAMED = 6


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


# A cell of a sweep: (repeat, batch size per DP rank, forced fraction or None on the diagonal).
Cell = tuple[int, int, float | None]


def asked_batch_sizes(sweep: SweepSpec) -> list[int]:
    """The batch sizes per DP rank sps-profiler measures for this sweep (builders passes
    `--batch-size` or `--max-batch-size`; the profiler sorts and deduplicates the list)."""
    if sweep.batch_sizes:
        return sorted(set(sweep.batch_sizes))
    return tapered_sweep(sweep.max_batch_size or DEFAULT_MAX_BATCH_SIZE)


def asked_fracs(sweep: SweepSpec) -> list[float]:
    """The fractions of an Additive run's off-diagonal phase (`--fracs`)."""
    return sorted({float(f) for f in sweep.fracs or DEFAULT_ADDITIVE_FRACS})


def asked_cells(spec: SpsProfileSpec, kind: TableKind) -> set[Cell]:
    """Every cell a run must cover: the diagonal (each repeat, each batch size), and for an
    Additive table (both phases' rounds) each fraction of those too."""
    sweep = spec.table.sweep
    fracs: list[float | None] = [None, *(asked_fracs(sweep) if kind == TableKind.ADDITIVE else [])]
    return {
        (repeat, bs, frac)
        for repeat in range(sweep.repeats)
        for bs in asked_batch_sizes(sweep)
        for frac in fracs
    }


def _cell_of(round_: Mapping[str, Any], fracs: Sequence[float]) -> Cell:
    """A validated round's cell, its fraction snapped to the asked one it matches."""
    frac = round_.get("frac")
    if frac is not None:
        frac = next((f for f in fracs if abs(frac - f) <= FRAC_TOLERANCE), float(frac))
    return (int(round_.get("repeat", 0)), int(round_["batch_size_per_rank"]), frac)


def describe_cell(cell: Cell) -> str:
    repeat, bs, frac = cell
    return f"repeat {repeat} bs {bs}" + ("" if frac is None else f" frac {frac:g}")


def _named(cells: Sequence[Cell]) -> str:
    named = ", ".join(describe_cell(c) for c in cells[:MAX_CELLS_NAMED])
    more = len(cells) - MAX_CELLS_NAMED
    return named + (f" and {more} more" if more > 0 else "")


def sweep_problems(
    rounds: Sequence[Mapping[str, Any]], spec: SpsProfileSpec, kind: TableKind
) -> list[str]:
    """Rounds the sweep did not ask for: a Job that measured something else (or lies)."""
    sweep = spec.table.sweep
    batch_sizes = set(asked_batch_sizes(sweep))
    fracs = asked_fracs(sweep)
    problems: dict[str, None] = {}  # ordered, without repeats
    cells = {(r["batch_size_per_rank"], r["batch_tokens"], r.get("frac")) for r in rounds}
    if len(cells) > MAX_FIT_CELLS:
        problems[f"{len(cells)} distinct cells; at most {MAX_FIT_CELLS} are fitted"] = None
    for r in rounds:
        bs, frac, repeat = r["batch_size_per_rank"], r.get("frac"), r.get("repeat", 0)
        if bs not in batch_sizes:
            where = "batchSizes" if sweep.batch_sizes else "the tapered sweep of maxBatchSize"
            problems[f"batch size {bs} is not in spec.table.sweep's {where}"] = None
        if repeat >= sweep.repeats:
            problems[f"repeat {repeat} but spec.table.sweep.repeats is {sweep.repeats}"] = None
        if frac is not None and (
            kind != TableKind.ADDITIVE or not any(abs(frac - f) <= FRAC_TOLERANCE for f in fracs)
        ):
            problems[f"fraction {frac} was not asked for"] = None
        if len(problems) >= 3:
            break
    return list(problems)


def duplicate_cells(rounds: Sequence[Mapping[str, Any]], spec: SpsProfileSpec) -> list[str]:
    """Cells reported more than once (stranded rounds aside, see the module): sps-profiler
    measures each (repeat, cell) once, and the fit takes a median over a cell's rounds, so
    copies of one round would outvote the real repeats."""
    fracs = asked_fracs(spec.table.sweep)
    counts: dict[Cell, int] = {}
    for round_ in rounds:
        cell = _cell_of(round_, fracs)
        counts[cell] = counts.get(cell, 0) + 1
    return [
        f"{describe_cell(c)} {counts[c]} times" for c in sorted(counts, key=_order) if counts[c] > 1
    ]


def _order(cell: Cell) -> tuple[int, int, float]:
    """Sweep order: repeat, batch size, the diagonal before the fractions."""
    repeat, bs, frac = cell
    return (repeat, bs, -1.0 if frac is None else frac)


def missing_cells(
    rounds: Sequence[Mapping[str, Any]], spec: SpsProfileSpec, kind: TableKind
) -> list[Cell]:
    """The asked cells no (usable) round covers, in sweep order."""
    fracs = asked_fracs(spec.table.sweep)
    covered = {_cell_of(r, fracs) for r in rounds}
    missing = asked_cells(spec, kind) - covered
    return sorted(missing, key=_order)


def coverage_verdict(
    rounds: Sequence[Mapping[str, Any]],
    spec: SpsProfileSpec,
    kind: TableKind,
    stranded: frozenset[int] = frozenset(),
) -> Verdict | None:
    """A refusal when the rounds (those at the `stranded` indices aside) report a cell
    twice or leave an asked cell out; None when they cover the sweep exactly."""
    usable = [r for i, r in enumerate(rounds) if i not in stranded]
    duplicates = duplicate_cells(usable, spec)
    if duplicates:
        return Verdict(
            SWEEP_MISMATCH,
            "the profiler's rounds report the same cell more than once: "
            + "; ".join(duplicates[:MAX_CELLS_NAMED])
            + ". sps-profiler measures each (repeat, cell) once, and copies would outvote "
            "the real repeats (a Job image that is not sps-profiler, or a result written twice)",
        )
    missing = missing_cells(usable, spec, kind)
    if not missing:
        return None
    asked = len(asked_cells(spec, kind))
    fracs = asked_fracs(spec.table.sweep)
    on_ramp = {_cell_of(rounds[i], fracs) for i in stranded} & set(missing)
    message = (
        f"the profiler's rounds cover {asked - len(missing)} of the {asked} cells "
        f"spec.table.sweep asks for; missing: {_named(missing)}"
    )
    if on_ramp:
        message += (
            f". {len(on_ramp)} of them were measured only on a clock ramp the run could not "
            "model, so their step times cannot be corrected: `kubectl sps reprofile` "
            "measures them again"
        )
    if len(on_ramp) < len(missing):
        message += (
            ". sps-profiler measures every cell or fails the run (a batch size above the "
            "server's --max-running-requests or CUDA-graph max bs fails it before measuring), "
            "so a short result is a Job that is not sps-profiler or a sweep changed during "
            "the run: use the operator's profiler image (remove spec.job.image), then "
            "`kubectl sps reprofile`"
        )
    return Verdict(INCOMPLETE_SWEEP, message)


# --- the judgement: a chain of links ---------------------------------------------------------
#
# A round's result is judged by a chain of small pure links, in order (as cert-manager's
# certificate trigger policies): each takes the judgement so far and returns a `Verdict`
# (a refusal, which ends the chain) or the judgement carried on, with what it added (the
# ramp models, the corrected rounds, the fit, the table). The first refusal wins; a
# judgement that passes every link is accepted.


@dataclass(frozen=True)
class Judgement:
    """What the chain knows about a run's result so far (each link adds its part)."""

    rounds: Sequence[Mapping[str, Any]]  # validated (`api.result.read_result`)
    spec: SpsProfileSpec
    kind: TableKind
    live: SpsTable | None = None
    # `ramp_models`: each run's clock-ramp model, and the rounds stranded on a ramp
    # no model can correct.
    ramps: Mapping[Any, RunRamp] = field(default_factory=dict)
    stranded: frozenset[int] = frozenset()
    # `correct_ramp`: the rounds a fit may use, corrected once, and the model used.
    usable: Sequence[Mapping[str, Any]] = ()
    clock_ramp: RampModel | None = None
    # `fit_table`, `self_check_table`.
    fit: FitResult | None = None
    table_json: str | None = None

    def fitted(self) -> FitResult:
        """The fit (links after `fit_table` only; an ordering mistake is a bug)."""
        if self.fit is None:
            raise LookupError("a link that needs the fit runs before fit_table")
        return self.fit


Link = Callable[[Judgement], Verdict | Judgement]


def match_sweep(judgement: Judgement) -> Verdict | Judgement:
    """Refuses rounds the sweep did not ask for (`sweep_problems`)."""
    problems = sweep_problems(judgement.rounds, judgement.spec, judgement.kind)
    if not problems:
        return judgement
    return Verdict(
        SWEEP_MISMATCH,
        "the profiler's rounds do not match the sweep this profile asked for: "
        + "; ".join(problems)
        + " (a Job image that is not sps-profiler, or a spec changed mid-run)",
    )


def _unfittable(exc: Exception) -> Verdict:
    return Verdict(FIT_FAILED, f"the rounds cannot be fitted into a table: {exc}")


def ramp_models(judgement: Judgement) -> Verdict | Judgement:
    """Fits each run's clock-ramp model once, and finds the rounds stranded on a ramp."""
    try:
        ramps = ramps_by_run(judgement.rounds)
        stranded = frozenset(stranded_rounds(judgement.rounds, ramps))
    except ValueError as exc:
        return _unfittable(exc)
    return replace(judgement, ramps=ramps, stranded=stranded)


def cover_sweep(judgement: Judgement) -> Verdict | Judgement:
    """Refuses rounds (the stranded ones aside) that miss an asked cell or repeat one."""
    return (
        coverage_verdict(judgement.rounds, judgement.spec, judgement.kind, judgement.stranded)
        or judgement
    )


def correct_ramp(judgement: Judgement) -> Verdict | Judgement:
    """Takes the clock ramp out of the usable rounds, once: the plausibility check and the
    fit both see the rounds as fitted (`clockramp.usable_rounds`)."""
    try:
        usable, model = usable_rounds(judgement.rounds, judgement.ramps)
    except ValueError as exc:
        return _unfittable(exc)
    return replace(judgement, usable=usable, clock_ramp=model)


def check_plausibility(judgement: Judgement) -> Verdict | Judgement:
    """Refuses a measurement whose corrected cells are not plausible (`doubtful_cells`)."""
    doubtful = doubtful_cells(judgement.usable)
    if not doubtful:
        return judgement
    return Verdict(
        DOUBTFUL_MEASUREMENT,
        "the measurement is not plausible: "
        + "; ".join(doubtful[:3])
        + ". Re-profile on an idle GPU (kubectl sps reprofile), or raise sweep.repeats",
    )


def fit_table(judgement: Judgement) -> Verdict | Judgement:
    """Fits the corrected rounds into a table of the run's kind."""
    try:
        fit = fit_corrected_rounds(judgement.usable, judgement.clock_ramp, kind=judgement.kind)
    except (ValueError, ArithmeticError) as exc:
        return _unfittable(exc)
    return replace(judgement, fit=fit)


def self_check_table(judgement: Judgement) -> Verdict | Judgement:
    """Refuses a table that fails its self-check over its whole domain (`self_check`)."""
    fit = judgement.fitted()
    problems = self_check(fit.table)
    if problems:
        return Verdict(
            SELF_CHECK_FAILED,
            "the fitted table fails its self-check: " + "; ".join(problems[:3]),
            fit,
        )
    return replace(judgement, table_json=fit.table.to_json())


def pass_gates(judgement: Judgement) -> Verdict | Judgement:
    """Refuses a table the profile's acceptance gates hold back (`gates.check_gates`)."""
    fit = judgement.fitted()
    result = check_gates(judgement.spec.gates, api_quality(fit), fit.table, judgement.live)
    if result.passed:
        return judgement
    return Verdict(result.reason, result.message, fit, judgement.table_json)


# The links before the gates: what a result must pass to be a table at all.
TABLE_CHAIN: tuple[Link, ...] = (
    match_sweep,
    ramp_models,
    cover_sweep,
    correct_ramp,
    check_plausibility,
    fit_table,
    self_check_table,
)
JUDGEMENT_CHAIN: tuple[Link, ...] = (*TABLE_CHAIN, pass_gates)


def run_chain(chain: Sequence[Link], judgement: Judgement) -> Verdict:
    """The first link's refusal, or the accepted table when every link passes."""
    for link in chain:
        outcome = link(judgement)
        if isinstance(outcome, Verdict):
            return outcome
        judgement = outcome
    return Verdict(None, "accepted", judgement.fitted(), judgement.table_json)


def judge(
    rounds: Sequence[Mapping[str, Any]],
    spec: SpsProfileSpec,
    *,
    kind: TableKind,
    live: SpsTable | None = None,
    gate: bool = True,
) -> Verdict:
    """Check, fit, self-check and (with `gate`) gate the validated rounds of a run."""
    return run_chain(judgement_chain(gate), Judgement(rounds, spec, kind, live))


def judgement_chain(gate: bool) -> tuple[Link, ...]:
    return JUDGEMENT_CHAIN if gate else TABLE_CHAIN
