"""The SPS table a simulated server loads at start-up, checked with SGLang's loader rules.

The project's table library (``sps_operator.tables.formats``) owns the formats; this module
only adapts it to what the simulated planner needs (is the table flat, lookups for the budget
argmax). Until that library exists a minimal copy of the loader rules stands in.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LoadedTable:
    """A loaded table reduced to what the simulated planner reads."""

    kind: str  # "diagonal" | "additive"
    data: dict[str, Any]
    uninitialized: bool

    def diagonal_lookup(self, batch_tokens: int) -> float:
        edges = self.data["sample_batch_tokens"]
        values = self.data["sample_steps_per_sec"]
        index = min(max(bisect.bisect_right(edges, batch_tokens) - 1, 0), len(values) - 1)
        return float(values[index])

    def additive_step_time(self, num_reqs: int, budget: int) -> float:
        d = self.data
        return (
            float(d["bias_seconds"])
            + _interp_clamped(d["bs_probes"], d["alpha_seconds"], num_reqs)
            + _interp_clamped(d["m_probes"], d["theta_seconds"], num_reqs + budget)
        )


def _interp_clamped(xs: list[int], ys: list[float], x: float) -> float:
    if x <= xs[0]:
        return float(ys[0])
    if x >= xs[-1]:
        return float(ys[-1])
    i = bisect.bisect_right(xs, x) - 1
    x0, x1 = xs[i], xs[i + 1]
    return float(ys[i] + (ys[i + 1] - ys[i]) * (x - x0) / (x1 - x0))


def load_table_file(path: str) -> LoadedTable:
    """Load and validate like ``load_sps_table_from_path``; ValueError with the loader's message."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"cannot read SPS table {path}: {exc.strerror or exc}") from exc
    return load_table_text(text)


def load_table_text(text: str) -> LoadedTable:
    try:
        from sps_operator.tables import formats  # owned by the tables part
    except ImportError:
        formats = None  # type: ignore[assignment]
    if formats is not None and hasattr(formats, "load_sps_table_text"):
        table = formats.load_sps_table_text(text)
        uninitialized = bool(formats.is_uninitialized_sps_table(table))
        data = json.loads(text)
        kind = "additive" if '"bias_seconds"' in text else "diagonal"
        return LoadedTable(kind=kind, data=data, uninitialized=uninitialized)
    return _fallback_load(text)


# --- minimal stand-in of SGLang's loader rules (used only until tables.formats exists) -----


def _fallback_load(text: str) -> LoadedTable:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"JSON is malformed: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError("Expected `object`, got `" + type(data).__name__ + "`")
    if '"bias_seconds"' in text:
        _require_float(data, "bias_seconds")
        for key in ("bs_probes", "m_probes"):
            _require_list(data, key, int)
        for key in ("alpha_seconds", "theta_seconds"):
            _require_list(data, key, float)
        for probes, values in (("bs_probes", "alpha_seconds"), ("m_probes", "theta_seconds")):
            if not data[probes]:
                raise ValueError(f"{probes} must be non-empty")
            if data[probes] != sorted(set(data[probes])):
                raise ValueError(f"{probes} must be strictly increasing")
            if len(data[probes]) != len(data[values]):
                raise ValueError(f"{probes} and {values} must have equal length")
        if not data["bias_seconds"] > 0:
            raise ValueError("bias_seconds must be > 0")
        return LoadedTable(kind="additive", data=data, uninitialized=False)
    _require_list(data, "sample_batch_tokens", int)
    _require_list(data, "sample_steps_per_sec", float)
    if "max_batch_tokens" not in data:
        raise ValueError("Object missing required field `max_batch_tokens`")
    if isinstance(data["max_batch_tokens"], bool) or not isinstance(data["max_batch_tokens"], int):
        raise ValueError("Expected `int`, got `float` - at `$.max_batch_tokens`")
    edges = data["sample_batch_tokens"]
    if not edges:
        raise ValueError("SpsCostTable requires at least one sample")
    if edges != sorted(set(edges)):
        raise ValueError("sample_batch_tokens must be strictly increasing")
    if len(edges) != len(data["sample_steps_per_sec"]):
        raise ValueError("sample_batch_tokens and sample_steps_per_sec must have equal length")
    if data["max_batch_tokens"] < edges[-1]:
        raise ValueError("max_batch_tokens must be >= the largest sample")
    return LoadedTable(kind="diagonal", data=data, uninitialized=len(edges) <= 1)


def _require_float(data: dict[str, Any], key: str) -> None:
    if key not in data:
        raise ValueError(f"Object missing required field `{key}`")
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"Expected `float`, got `{type(value).__name__}` - at `$.{key}`")


def _require_list(data: dict[str, Any], key: str, item: type) -> None:
    if key not in data:
        raise ValueError(f"Object missing required field `{key}`")
    value = data[key]
    if not isinstance(value, list):
        raise ValueError(f"Expected `array`, got `{type(value).__name__}` - at `$.{key}`")
    for i, v in enumerate(value):
        ok = (
            isinstance(v, int) and not isinstance(v, bool)
            if item is int
            else isinstance(v, int | float) and not isinstance(v, bool)
        )
        if not ok:
            raise ValueError(
                f"Expected `{item.__name__}`, got `{type(v).__name__}` - at `$.{key}[{i}]`"
            )
