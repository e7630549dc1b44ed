"""How much grid error does the additive fit make from cell noise alone?

Offline (no server, no profiler run): the matrix's additive sweep (bs 1..48 tapered × fracs
0.25..1.0 on H100), each cell's step time the simulator's truth times lognormal noise of
`--cell-se` (the relative standard error a round's median reaches: ≈ 0.8 % at 10 %
independent noise and 240 steps, ≈ 2.4 % at φ = 0.8, where 240 steps are ≈ 40 independent
ones), fitted with `fit_from_rounds(..., TableKind.ADDITIVE)` and compared with the truth over the
matrix's grid, over `--seeds` seeds. Says whether a grid RMS that swings between runs is
the fit's doing or the cells'.

    .venv/bin/python bench/additive_fit_noise.py --cell-se 0.024 0.008 --seeds 40
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from profiler_matrix import FRACS, GAMMA, MAX_BS, grid_errors, truth_rows
from sps_operator.api.kinds import TableKind
from sps_operator.dspark_arith import (
    compact_tiers,
    default_decode_capture_bs,
    round_up,
    runner_capture_bs,
)
from sps_operator.profiler.sweep import build_request_count_sweep
from sps_operator.tables.fit import fit_from_rounds
from sps_sim.costmodel import GPU_H100, PRESETS


def noisy_rounds(
    truth: dict[tuple[int, int], float], tiers: Sequence[int], cell_se: float, seed: int
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rounds = []
    for bs in build_request_count_sweep(MAX_BS):
        for frac in FRACS:
            m = min(bs + int(frac * (bs * GAMMA)), bs * (GAMMA + 1))
            t = truth[(bs, m)] * math.exp(rng.gauss(0.0, cell_se))
            rounds.append(
                {
                    "repeat": 0,
                    "batch_size_per_rank": bs,
                    "batch_tokens": m,
                    "frac": frac,
                    "steps_per_sec": 1 / t,
                    "median_step_time": t,
                    "step_time_se": t * cell_se,
                    "ci_low": t * (1 - 1.96 * cell_se),
                    "ci_high": t * (1 + 1.96 * cell_se),
                    "graph_tier": round_up(tiers, m),
                    "graph_tiers": list(tiers),
                }
            )
    return rounds


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cell-se", type=float, nargs="+", default=[0.024, 0.008])
    p.add_argument("--seeds", type=int, default=40)
    ns = p.parse_args(argv)
    preset = PRESETS[GPU_H100]
    rows = truth_rows(preset)
    truth = {(r["bs"], r["M"]): r["seconds"] for r in rows}
    capture = default_decode_capture_bs(preset.default_cuda_graph_max_bs(1))
    tiers = compact_tiers(runner_capture_bs(capture, MAX_BS), GAMMA + 1)
    print("| cell se | grid RMS mean ± sd [min, max] | max error mean [max] |")
    print("|---|---|---|")
    for cell_se in ns.cell_se:
        rms, worst = [], []
        for seed in range(ns.seeds):
            fit = fit_from_rounds(noisy_rounds(truth, tiers, cell_se, seed), TableKind.ADDITIVE)
            r, w = grid_errors(fit.table, rows, diagonal_only=False)
            rms.append(r)
            worst.append(w)
        print(
            f"| {cell_se:.1%} | {statistics.fmean(rms):.2%} ± {statistics.pstdev(rms):.2%} "
            f"[{min(rms):.2%}, {max(rms):.2%}] | {statistics.fmean(worst):.2%} "
            f"[{max(worst):.2%}] |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
