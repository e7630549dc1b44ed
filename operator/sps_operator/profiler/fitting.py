"""`sps-profiler fit`: saved rounds → table, self-check, manifest update, plot (no server)."""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from sps_operator.api.kinds import TableKind
from sps_operator.profiler import artifacts
from sps_operator.tables.fit import FitResult, cells_from_rounds, fit_from_rounds
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsTable
from sps_operator.tables.selfcheck import doubtful_cells, self_check, step_range_problems

logger = logging.getLogger(__name__)


class FitError(RuntimeError):
    """Nothing to fit, or the fit cannot give a table SGLang loads."""


def fit_profile(
    out: str,
    *,
    max_batch_tokens: int | None = None,
    run_self_check: bool = True,
    plot: bool = True,
    kind: TableKind | None = None,
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
    # Saved rounds fitted without --kind: an off-diagonal round says Additive.
    resolved = kind or (
        TableKind.ADDITIVE if any(r.get("frac") is not None for r in rounds) else TableKind.DIAGONAL
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
    if run_self_check:
        # The self-check the operator judges every table by before publishing it.
        problems = self_check(result.table)
        if problems:
            raise FitError(
                "The fitted table fails its self-check: "
                + "; ".join(problems[:3])
                + ". No table was written."
            )
        for warning in doubtful_cells(rounds):  # the operator refuses such a measurement
            logger.warning("%s; was the server at steady state (co-tenants, clocks)?", warning)
    text = result.table.to_json()
    paths.table.write_text(text, encoding="utf-8")
    _describe(result.table, paths.table.name)
    _update_manifest(paths, result)
    if plot:
        from sps_operator.plot import INSTALL_PLOT, PlotUnavailable, plot_fit

        q = result.quality
        try:
            plot_fit(
                cells_from_rounds(rounds),
                result.table,
                paths.plot,
                title=f"{resolved.lower()} fit: RMS {q.rms_ms:.3f} ms ({q.rms_rel:.2%}), "
                f"R² {q.r2:.4f}",
            )
        except PlotUnavailable as exc:
            raise FitError(
                f"{paths.table} was written, but the plot needs {exc.module}, which is not "
                f"installed: {INSTALL_PLOT}, or pass --no-plot"
            ) from None
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
        "kind": result.kind.lower(),  # the manifest's word since v1
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
