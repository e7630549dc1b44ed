"""A line of a run's rounds (`rounds.jsonl`, the result ConfigMap's `rounds`), as the
profiler writes it, for tests that build results by hand (one helper for all)."""

from __future__ import annotations

from typing import Any


def round_line(
    bs: int, m: int, sps: float, frac: float | None = None, repeat: int = 0, **extra: Any
) -> dict[str, Any]:
    """One measured round: batch size `bs` (one DP rank), `m` batch tokens per step,
    `sps` steps per second; `extra` adds fields (the clock window, the ramp, ...)."""
    return {
        "repeat": repeat,
        "batch_size": bs,
        "batch_size_per_rank": bs,
        "frac": frac,
        "batch_tokens": m,
        "steps_per_sec": sps,
        "num_steady_steps": 40,
        **extra,
    }
