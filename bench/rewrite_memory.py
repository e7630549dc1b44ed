"""The write-back memory (`process.memories.Rewrites`) once full: the cost of a write of a
new key past the bound against one while it fills, side by side in one run (ratio ~1; a
scan of the whole memory at every new key made it ~1,400x, which a tenant's churn of
write-backs would make every tenant's writes pay under the process-wide lock).

    python bench/rewrite_memory.py [--writes N]
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta

from sps_operator.controller.policies.stable_writers import MAX_CONTESTS
from sps_operator.controller.process.memories import Rewrites


def per_write(rewrites: Rewrites, prefix: str, writes: int, at: datetime) -> float:
    started = time.perf_counter()
    for i in range(writes):
        rewrites.wrote((prefix, str(i)), "hold", at)
    return (time.perf_counter() - started) / writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=2000)
    args = parser.parse_args()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rewrites = Rewrites()
    filling = per_write(rewrites, "fill", MAX_CONTESTS, t0)
    full = per_write(rewrites, "past", args.writes, t0 + timedelta(seconds=1))
    print(
        f"filling: {filling * 1e6:.1f} us/write; past the bound: {full * 1e6:.1f} us/write; "
        f"ratio {full / filling:.2f}"
    )


if __name__ == "__main__":
    main()
