"""Reading a run's result ConfigMap and turning rounds into a table (pure)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sps_operator.api.models import FitQuality as ApiFitQuality
from sps_operator.profiler.publish import PublishError, read_result
from sps_operator.tables.fit import FitResult, fit_from_rounds


@dataclass(frozen=True)
class RunResult:
    status: str  # "", running, succeeded, failed
    message: str = ""
    progress: str = ""
    manifest: Mapping[str, Any] = field(default_factory=dict)
    rounds: Sequence[Mapping[str, Any]] = field(default_factory=list)


def read_run_result(
    data: Mapping[str, str] | None, binary_data: Mapping[str, str] | None
) -> RunResult:
    """The profiler's published result (its own reader); content it would never write
    reads as a failed run."""
    try:
        res = read_result(dict(data or {}), dict(binary_data or {}))
    except PublishError as exc:
        return RunResult(status="failed", message=f"unreadable result ConfigMap: {exc}")
    return RunResult(
        status=res.status,
        message=res.message,
        progress=res.progress,
        manifest=res.manifest,
        rounds=res.rounds,
    )


def api_quality(fit: FitResult) -> ApiFitQuality:
    q = fit.quality
    worst = q.worst_cell.rel_error if q.worst_cell is not None else None
    r2 = q.r2 if q.r2 == q.r2 and abs(q.r2) != float("inf") else None  # NaN/inf -> None
    return ApiFitQuality(rms_ms=round(q.rms_ms, 6), r2=r2, max_rel_err=worst)


def fit_rounds(rounds: Sequence[Mapping[str, Any]], additive: bool) -> FitResult:
    return fit_from_rounds(list(rounds), kind="additive" if additive else "diagonal")


def rounds_jsonl(rounds: Sequence[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rounds)
