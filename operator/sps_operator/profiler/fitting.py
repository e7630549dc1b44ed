"""`sps-profiler fit`: saved rounds → table, self-check, manifest update, plot (no server)."""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from sps_operator.profiler import artifacts
from sps_operator.tables.fit import FitKind, FitResult, cells_from_rounds, fit_from_rounds
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsTable, load_sps_table_text
from sps_operator.tables.selfcheck import step_range_problems

logger = logging.getLogger(__name__)


class FitError(RuntimeError):
    """Nothing to fit, or the fit cannot give a table SGLang loads."""


def self_check(table_text: str) -> list[str]:
    """Reload the written text like SGLang and check lookups; return warnings, raise on errors."""
    table = load_sps_table_text(table_text)
    warnings: list[str] = []
    if isinstance(table, SpsAdditiveCostTable):
        for bs in table.bs_probes:
            for budget in (0, max(0, max(table.m_probes) - table.bs_probes[0])):
                value = table.step_time(num_reqs=bs, budget=budget)
                if not value > 0:
                    raise FitError(
                        f"additive table step_time(num_reqs={bs}, budget={budget}) = {value} <= 0"
                    )
        return warnings
    previous: float | None = None
    for probe in table.sample_batch_tokens:
        value = table.lookup(probe)
        if not value > 0:
            raise FitError(f"table lookup at batch_tokens={probe} gave {value} <= 0")
        if previous is not None and value > previous * 1.10:
            warnings.append(
                f"steps/s rises by more than 10% at batch_tokens={probe} ({previous:.2f} → "
                f"{value:.2f}); was the server at steady state (co-tenants, clocks)?"
            )
        previous = value
    if table.lookup(table.sample_batch_tokens[0] - 1) != table.sample_steps_per_sec[0]:
        raise FitError("lookup below the smallest probe did not clamp to the first value")
    return warnings


def fit_profile(
    out: str,
    *,
    max_batch_tokens: int | None = None,
    run_self_check: bool = True,
    plot: bool = True,
    kind: FitKind | None = None,
    diagonal_probes: Literal["tiers", "measured"] = "tiers",
) -> FitResult:
    paths = artifacts.OutPaths.for_out(out)
    if not paths.rounds.exists():
        raise FitError(
            f"No rounds file at {paths.rounds}; run `sps-profiler run` first (or point --out at "
            "a previous run's table path)."
        )
    rounds = artifacts.read_jsonl(paths.rounds)
    if not rounds:
        raise FitError(f"{paths.rounds} has no rounds to fit.")
    resolved: FitKind = kind or (
        "additive" if any(r.get("frac") is not None for r in rounds) else "diagonal"
    )
    try:
        result = fit_from_rounds(
            rounds,
            kind=resolved,
            max_batch_tokens=max_batch_tokens,
            diagonal_probes=diagonal_probes,
        )
    except ValueError as exc:
        raise FitError(str(exc)) from exc
    # Physics, not a warning: checked even with --no-self-check, never written otherwise.
    implausible = step_range_problems(result.table)
    if implausible:
        raise FitError(
            "The fitted table is not a decode step of a real model on a real GPU: "
            + "; ".join(implausible[:3])
            + f". Were the step times recorded in {paths.rounds.name} seconds where SGLang "
            "writes milliseconds (step_cpu_ms)? No table was written."
        )
    text = result.table.to_json()
    if run_self_check:
        for warning in self_check(text):
            logger.warning("%s", warning)
    paths.table.write_text(text, encoding="utf-8")
    _describe(result.table, paths.table.name)
    _update_manifest(paths, result)
    if plot:
        from sps_operator.profiler.plot import plot_fit

        q = result.quality
        plot_fit(
            cells_from_rounds(rounds),
            result.table,
            paths.plot,
            title=f"{resolved} fit: RMS {q.rms_ms:.3f} ms ({q.rms_rel:.2%}), R² {q.r2:.4f}",
        )
        logger.info("Wrote %s", paths.plot)
    return result


def _describe(table: SpsTable, name: str) -> None:
    if isinstance(table, SpsAdditiveCostTable):
        logger.info(
            "Fit SpsAdditiveCostTable (%d bs probes x %d M probes) -> %s",
            len(table.bs_probes),
            len(table.m_probes),
            name,
        )
    else:
        logger.info("Fit SpsCostTable (%d probes) -> %s", len(table.sample_batch_tokens), name)


def _update_manifest(paths: artifacts.OutPaths, result: FitResult) -> None:
    manifest: dict[str, Any] = {}
    if paths.manifest.exists():
        try:
            manifest = json.loads(paths.manifest.read_text())
        except json.JSONDecodeError:
            logger.warning("%s is not JSON; rewriting it with the fit only.", paths.manifest)
    manifest["fit"] = {
        "kind": result.kind,
        "table": paths.table.name,
        "table_sha256": artifacts.sha256_file(paths.table),
        "quality": result.quality.to_dict(),
        "smoothing": result.smoothing,
    }
    if result.clock_ramp is not None:
        manifest["fit"]["clock_ramp"] = result.clock_ramp
    hashes = manifest.setdefault("artifacts_sha256", {})
    for path in (paths.rounds, paths.records, paths.table):
        if path.exists():
            hashes[path.name] = artifacts.sha256_file(path)
    artifacts.write_json_atomic(paths.manifest, manifest)
