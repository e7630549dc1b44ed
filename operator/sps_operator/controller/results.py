"""Reading a run's result ConfigMap and turning rounds into a table (pure)."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sps_operator.api.models import FitQuality as ApiFitQuality
from sps_operator.tables.fit import FitResult, fit_from_rounds


@dataclass(frozen=True)
class RunResult:
    status: str  # "", running, succeeded, failed
    message: str = ""
    progress: str = ""
    manifest: Mapping[str, Any] = field(default_factory=dict)
    rounds: Sequence[Mapping[str, Any]] = field(default_factory=list)


def _parse_rounds_text(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def read_run_result(
    data: Mapping[str, str] | None, binary_data: Mapping[str, str] | None
) -> RunResult:
    """The profiler's published result. Uses the profiler's own reader when present."""
    read_result: Any = None
    try:
        from sps_operator.profiler import publish

        read_result = publish.read_result
    except ImportError:  # the profiler's reader not installed: parse the documented keys
        pass
    if read_result is not None:
        res = read_result(dict(data or {}), dict(binary_data or {}))
        return RunResult(
            status=str(getattr(res, "status", "") or ""),
            message=str(getattr(res, "message", "") or ""),
            progress=str(getattr(res, "progress", "") or ""),
            manifest=dict(getattr(res, "manifest", {}) or {}),
            rounds=list(getattr(res, "rounds", []) or []),
        )
    data = data or {}
    binary_data = binary_data or {}
    rounds: list[dict[str, Any]] = []
    if "rounds.jsonl" in data:
        rounds = _parse_rounds_text(data["rounds.jsonl"])
    elif "rounds.jsonl.gz" in binary_data:
        raw = gzip.decompress(base64.b64decode(binary_data["rounds.jsonl.gz"]))
        rounds = _parse_rounds_text(raw.decode())
    manifest = json.loads(data["manifest.json"]) if data.get("manifest.json") else {}
    return RunResult(
        status=data.get("status", ""),
        message=data.get("message", ""),
        progress=data.get("progress", ""),
        manifest=manifest,
        rounds=rounds,
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
