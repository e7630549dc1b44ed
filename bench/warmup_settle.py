"""When does the warm-up call the clocks settled, and how much of a ramp is left then?

Offline (no server, no profiler run): step times are drawn from the simulator's own noise
model (`sps_sim.costmodel.NoiseSource`) for the matrix's effects at one fixed step
time, polled every `--poll-steps` steps as the warm-up polls, and judged as the warm-up
judges them: settled by `sps_operator.profiler.steady.clocks_settled`, or by a ramp the
model places as over before the current round (`sps_operator.tables.clockramp.
ramp_over_from`), or — after 3 s — on a ramp the model describes (`ramp_evident`: the
sweep starts on the ramp and the fit corrects it). Per effect: the model seconds the
warm-up took (its GPU time), the clock ramp left at that point, and how many seeds ended
on a ramp, over `--seeds` seeds (`--no-model`: the thirds only, as before the ramp model),
and how many settled while more than the tolerance of a ramp was left.

    .venv/bin/python bench/warmup_settle.py --seeds 40
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from dataclasses import replace
from typing import TypedDict

from sps_operator.profiler.steady import (
    AR1_MARGIN_SE,
    MIN_SETTLE_SECONDS,
    ar1_from_differences,
    clocks_settled,
    still_falling,
)
from sps_operator.profiler.sweep import DEFAULT_CI_LEVEL_Z, DEFAULT_CI_REL_WIDTH
from sps_operator.tables.clockramp import CHUNK_STEPS, chunk_series, ramp_evident, ramp_over_from
from sps_sim.costmodel import GPU_H100, PRESETS, CostPreset, NoiseSource, without_effects


class Effects(TypedDict, total=False):
    """The preset fields a case sets (each a float field of `CostPreset`)."""

    noise_ar1: float
    outlier_prob: float
    warmup_amplitude: float
    warmup_tau_s: float


RAMP: Effects = {"warmup_amplitude": 0.30, "warmup_tau_s": 5.0}
CASES: dict[str, tuple[float, Effects]] = {
    "3% none": (0.03, {}),
    "10% none": (0.10, {}),
    "10% outliers": (0.10, {"outlier_prob": 0.03}),
    "3% AR(1)": (0.03, {"noise_ar1": 0.8}),
    "10% AR(1)": (0.10, {"noise_ar1": 0.8}),
    "3% short ramp (sim default)": (0.03, {"warmup_amplitude": 0.10, "warmup_tau_s": 0.5}),
    "3% clock ramp": (0.03, RAMP),
    "10% clock ramp": (0.10, RAMP),
    "10% ramp + outliers": (0.10, {**RAMP, "outlier_prob": 0.03}),
    "10% ramp + AR(1)": (0.10, {**RAMP, "noise_ar1": 0.8}),
    "10% ramp + AR(1) 0.3 + 3% outliers": (0.10, {**RAMP, "noise_ar1": 0.3, "outlier_prob": 0.03}),
    "10% ramp +15 %/2 s": (0.10, {"warmup_amplitude": 0.15, "warmup_tau_s": 2.0}),
}
# On the preset's own effects (its +10 %/0.5 s ramp, AR(1) 0.3, stalls, KV growth), not on
# a quiet preset: the issue 23 cell and its neighbour.
PRESET_CASES: dict[str, tuple[float, Effects]] = {
    "H100 defaults, 10%, 3% outliers (issue 23 cell)": (0.10, {"outlier_prob": 0.03}),
    "H100 defaults, 10%": (0.10, {}),
}
MAX_STEPS = 3000
ROUND_STEPS = 240  # a warm-up round's steady steps: the step index restarts with each


def case_preset(noise: float, effects: Effects, quiet: bool = True) -> CostPreset:
    """The H100 preset with noise `noise` and `effects`, on no other effect when `quiet`."""
    base = without_effects(PRESETS[GPU_H100]) if quiet else PRESETS[GPU_H100]
    return replace(base, noise_cv=noise, **effects)


def settle(
    preset: CostPreset, seed: int, step_s: float, poll_steps: int, model: bool = True
) -> tuple[float, float, bool]:
    """(model seconds until the warm-up ends, ramp left then (relative), ended on a ramp)."""
    noise = NoiseSource(preset, seed)
    now = 0.0
    times: list[float] = []
    clocks: list[float] = []
    tolerance = DEFAULT_CI_REL_WIDTH / 2
    on_ramp = False
    while len(times) < MAX_STEPS:
        for _ in range(poll_steps):
            step = step_s * noise.factor(now, now, 0)
            clocks.append(now)
            now += step
            times.append(step)
        if clocks_settled(times, z=DEFAULT_CI_LEVEL_Z, tolerance_rel=tolerance):
            break
        if model and now >= MIN_SETTLE_SECONDS and len(times) >= CHUNK_STEPS:
            chunks = []
            for start in range(0, len(times), ROUND_STEPS):
                part = chunk_series(
                    times[start : start + ROUND_STEPS], clocks[start : start + ROUND_STEPS]
                )
                chunks += [(c[0], c[1], c[2]) for c in part]
            phi, phi_se = ar1_from_differences(times)
            step_ar1 = phi + AR1_MARGIN_SE * phi_se
            live = still_falling(times, z=DEFAULT_CI_LEVEL_Z)
            if live and ramp_evident(chunks, tolerance, step_ar1):
                on_ramp = True
                break
            # A ramp the model places as over before the current round's start.
            over_from = ramp_over_from(chunks, tolerance, step_ar1)
            round_start = clocks[(len(times) - 1) // ROUND_STEPS * ROUND_STEPS]
            if over_from is not None and over_from <= round_start:
                break
    left = preset.warmup_amplitude * math.exp(-now / preset.warmup_tau_s)
    return now, left if preset.warmup_amplitude else 0.0, on_ramp


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=40)
    p.add_argument("--step-ms", type=float, default=10.64, help="H100 bs 1 diagonal step")
    p.add_argument("--poll-steps", type=int, default=23, help="steps between polls (0.25 s)")
    p.add_argument("--no-model", action="store_true", help="settling only (no ramp model)")
    ns = p.parse_args(argv)
    tolerance = DEFAULT_CI_REL_WIDTH / 2
    print(
        "| effect | warm-up s median, q90 [max] | ramp left: mean, max | ended on a ramp |"
        f" settled with > {tolerance:.1%} of a ramp left |"
    )
    print("|---|---|---|---|---|")
    cases = [(name, case_preset(*case)) for name, case in CASES.items()]
    cases += [(name, case_preset(*case, quiet=False)) for name, case in PRESET_CASES.items()]
    for name, preset in cases:
        runs = [
            settle(preset, seed, ns.step_ms / 1e3, ns.poll_steps, not ns.no_model)
            for seed in range(ns.seeds)
        ]
        took = sorted(r[0] for r in runs)
        left = [r[1] for r in runs]
        q90 = took[int(0.9 * (len(took) - 1))]
        # Settled (not modelled as a ramp) while more than the tolerance was left: the
        # rounds after it measure the ramp.
        false_settles = sum(not r[2] and r[1] > tolerance for r in runs)
        print(
            f"| {name} | {statistics.median(took):.1f}, {q90:.1f} [{took[-1]:.1f}] | "
            f"{statistics.fmean(left):.2%}, {max(left):.2%} | "
            f"{sum(r[2] for r in runs)}/{len(runs)} | {false_settles}/{len(runs)} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
