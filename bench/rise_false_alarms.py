"""How often `steady.level_rise` calls a rise in rounds with no cap (offline, seconds).

Simulated noise-only rounds of 244 steps (lognormal noise, AR(1), outliers, a slight KV
trend), judged at the round's end and, as `ActiveRound.wait` does, at every poll (every 12
steps here): one poll's rise enough, two polls in a row from step 48, and two in a row
once each of the 8 blocks holds `LIVE_RISE_BLOCK_STEPS` (with and without the run's pooled
φ, which the profiler passes as `ar1_prior`). A false alarm costs a round measured again.

    .venv/bin/python bench/rise_false_alarms.py --rounds 300
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Sequence

from sps_operator.profiler.steady import (
    LIVE_RISE_BLOCK_STEPS,
    RISE_BLOCKS,
    Ar1Prior,
    level_rise,
)

STEPS = 244
POLL_STEPS = 12
CASES = [(0.03, 0.0, 0.0), (0.10, 0.0, 0.0), (0.10, 0.3, 0.03), (0.10, 0.8, 0.0)]


def noise_only_round(cv: float, phi: float, outlier_prob: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    sigma = math.sqrt(math.log1p(cv * cv))
    z = rng.gauss(0, 1)
    out = []
    for i in range(STEPS):
        step = 0.01 * math.exp(sigma * z) * (1 + 2e-5 * i)
        if rng.random() < outlier_prob:
            step *= rng.uniform(1.5, 4.0)
        out.append(step)
        z = phi * z + math.sqrt(1 - phi * phi) * rng.gauss(0, 1)
    return out


def alarms(times: Sequence[float], first: int, in_a_row: int, prior: Ar1Prior | None) -> bool:
    run = 0
    for n in range(first, len(times) + 1, POLL_STEPS):
        seen = level_rise(times[:n], ci_rel_width=0.02, z=1.96, ar1_prior=prior) is not None
        run = run + 1 if seen else 0
        if run >= in_a_row:
            return True
    return False


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=300)
    ns = p.parse_args()
    live_first = RISE_BLOCKS * LIVE_RISE_BLOCK_STEPS
    print(
        "| noise | φ | outliers | end of round | any poll from 48 | two in a row from 48 "
        f"| two in a row from {live_first} | the same with the pooled φ |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for cv, phi, outliers in CASES:
        counts = [0] * 5
        for seed in range(ns.rounds):
            times = noise_only_round(cv, phi, outliers, seed)
            prior = Ar1Prior(phi, 0.05)
            counts[0] += level_rise(times, ci_rel_width=0.02, z=1.96) is not None
            counts[1] += alarms(times, 48, 1, None)
            counts[2] += alarms(times, 48, 2, None)
            counts[3] += alarms(times, live_first, 2, None)
            counts[4] += alarms(times, live_first, 2, prior)
        shares = " | ".join(f"{c / ns.rounds:.1%}" for c in counts)
        print(f"| {cv:.0%} | {phi} | {outliers:.0%} | {shares} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
