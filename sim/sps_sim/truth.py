"""`sps-sim truth`: the true (noise-free, median) step time over a (bs, M) grid.

For each per-rank batch size ``bs`` and verify-token count ``M`` in ``[bs, bs*K]`` it gives the
step time a compact-mode server with this capture configuration really runs (``seconds``: the
graph tier replayed for M) and the smooth model at exactly M (``seconds_untiered``). The
diagonal (``M = bs*K``) is what a static-mode server runs.

The truth is the step at the preset's reference context (``kv_reference_tokens`` per
request), with warm clocks, no throttling, no stall and the noise's median: exact whatever
the preset's effects, which only ever move a measured step away from it. ``context`` gives
the noise-free step at another context per request instead.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sps_operator import dspark_arith
from sps_sim.costmodel import DEFAULT_PRESET, CostPreset, load_preset


def truth_grid(
    preset: CostPreset,
    *,
    gamma: int,
    batch_sizes: Sequence[int],
    capture_bs: Sequence[int],
    max_running_per_dp: int,
    m_step: int = 1,
    context: int | None = None,
) -> list[dict[str, Any]]:
    """Rows {bs, M, tier, seconds, seconds_untiered, diagonal} (pure)."""
    per_request = preset.kv_reference_tokens if context is None else context

    def seconds(bs: int, tokens: int, eager: bool = False) -> float:
        return preset.decode_seconds_at_context(bs, tokens, bs * per_request, eager=eager)

    k = gamma + 1
    runner = dspark_arith.runner_capture_bs(capture_bs, max_running_per_dp)
    tiers = dspark_arith.compact_tiers(runner, k)
    rows: list[dict[str, Any]] = []
    for bs in batch_sizes:
        ms = sorted({*range(bs, bs * k + 1, max(1, m_step)), bs * k})
        for m in ms:
            tier = dspark_arith.round_up(tiers, m) if tiers and bs <= runner[-1] else None
            eager = tier is None
            run_tokens = m if tier is None else tier
            if tier is None:
                run_tokens = bs * k if tiers else m
            rows.append(
                {
                    "bs": bs,
                    "M": m,
                    "budget": m - bs,
                    "tier": run_tokens,
                    "seconds": seconds(bs, run_tokens, eager),
                    "seconds_untiered": seconds(bs, m),
                    "diagonal": m == bs * k,
                }
            )
    return rows


def main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="sps-sim truth", allow_abbrev=False)
    p.add_argument("--preset", default=DEFAULT_PRESET, help="GPU product or preset file")
    p.add_argument("--out", default="-", help="output file (.json or .csv); - for stdout JSON")
    p.add_argument("--format", choices=("json", "csv"), default=None)
    p.add_argument("--max-bs", type=int, default=48, help="largest per-rank batch size")
    p.add_argument("--batch-size", type=int, nargs="+", default=None, help="explicit bs list")
    p.add_argument("--gamma", type=int, default=7, help="draft tokens per request (K-1)")
    p.add_argument("--m-step", type=int, default=1, help="stride of the M axis")
    p.add_argument(
        "--context",
        type=int,
        default=None,
        help="KV tokens per request (default: the preset's kv_reference_tokens, the truth)",
    )
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--cuda-graph-max-bs", type=int, default=None)
    p.add_argument("--cuda-graph-bs-decode", type=int, nargs="+", default=None)
    p.add_argument("--max-running-requests-per-dp", type=int, default=None)
    ns = p.parse_args(list(argv))
    try:
        preset = load_preset(ns.preset)
    except ValueError as exc:
        print(f"sps-sim truth: error: {exc}", file=sys.stderr)
        return 2
    if (
        ns.gamma < 1
        or ns.max_bs < 1
        or ns.m_step < 1
        or (ns.context is not None and ns.context < 0)
    ):
        print(
            "sps-sim truth: error: --gamma, --max-bs, --m-step must be >= 1, --context >= 0",
            file=sys.stderr,
        )
        return 2
    batch_sizes = ns.batch_size or list(range(1, ns.max_bs + 1))
    max_bs = ns.cuda_graph_max_bs or preset.default_cuda_graph_max_bs(ns.tp_size)
    capture = ns.cuda_graph_bs_decode or dspark_arith.default_decode_capture_bs(max_bs)
    pool = ns.max_running_requests_per_dp or max(max(batch_sizes), 48)
    rows = truth_grid(
        preset,
        gamma=ns.gamma,
        batch_sizes=batch_sizes,
        capture_bs=capture,
        max_running_per_dp=pool,
        m_step=ns.m_step,
        context=ns.context,
    )
    fmt = ns.format or ("csv" if str(ns.out).endswith(".csv") else "json")
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
        text = buf.getvalue()
    else:
        text = json.dumps(
            {
                "preset": preset.name,
                "gamma": ns.gamma,
                "verify_num_draft_tokens": ns.gamma + 1,
                "capture_bs": list(capture),
                "units": "seconds per decode step per DP rank (noise-free median)",
                "context_per_request": ns.context
                if ns.context is not None
                else preset.kv_reference_tokens,
                "rows": rows,
            },
            indent=1,
        )
    if ns.out == "-":
        sys.stdout.write(text)
    else:
        Path(ns.out).write_text(text)
    return 0
