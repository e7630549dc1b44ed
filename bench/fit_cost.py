"""Cost of the additive fit against the number of distinct (bs, M) cells, in one run.

Cells as a cap-accept server gives them (no graph tier: every distinct M is a knot until
the knot cap), noise 1 %. Reported per size: wall seconds and peak traced memory of
`fit_additive_cells`, and the ratio to the smallest size, so growth shows as a slope
(n → 2n doubling the time is linear). Above `MAX_ADDITIVE_CELLS` the fit refuses.

    .venv/bin/python bench/fit_cost.py [--sizes 100 200 400 800 1600 3200]
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc
from collections.abc import Sequence

from sps_operator.tables.fit import MAX_ADDITIVE_CELLS, fit_additive_cells
from sps_operator.tables.quality import Cell


def cells(n: int, seed: int = 0) -> list[Cell]:
    """`n` distinct cells over bs 1..64 and M in [bs, 8·bs] (cap-accept: no tier)."""
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    out: list[Cell] = []
    while len(out) < n:
        bs = rng.randint(1, 64)
        m = rng.randint(bs, 8 * bs)
        if (bs, m) in seen:
            continue
        seen.add((bs, m))
        t = (0.0105 + 45e-6 * bs + 6e-6 * m) * (1 + rng.gauss(0, 0.01))
        out.append(Cell(bs=bs, m=m, t=t))
    return out


def measure(n: int) -> tuple[float, float]:
    data = cells(n)
    tracemalloc.start()
    started = time.perf_counter()
    fit_additive_cells(data)
    seconds = time.perf_counter() - started
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return seconds, peak / 2**20


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100, 200, 400, 800, 1600, 3200])
    ns = p.parse_args(argv)
    print(f"MAX_ADDITIVE_CELLS = {MAX_ADDITIVE_CELLS}")
    print("| distinct cells | seconds | peak MiB | time / smallest |")
    print("|---|---|---|---|")
    base: float | None = None
    for n in ns.sizes:
        seconds, mib = measure(n)
        base = base or seconds
        print(f"| {n} | {seconds:.3f} | {mib:.1f} | {seconds / base:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
