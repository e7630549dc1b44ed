"""How far a profiler run is from the statistical minimum (issue 23 item 4).

For each grid point (one round of a run), the steps a ±`rel_half_width` (95 %) confidence
interval on its level needs, given the noise and autocorrelation the run's rounds measured,
priced at the round's step time; plus what the profiler must pay anyway (the run's warm-up
before its first measured window, prefill and everything else off the decode clock, and
`ROUND_WARMUP_STEPS` dropped steps per round). The ratio spent / minimum says how much of
the GPU time the stopping rule and its overheads add.

The steps one interval needs, for noise of marginal relative scale σ and lag-1 correlation ρ
(Gaussian AR(1)):

* mean (the efficient estimator for Gaussian noise): n = (z·σ/ε)² · (1 + ρ)/(1 − ρ);
* median (what the profiler reports, robust to outliers): n = (z·σ/ε)² · π/2 · τ(ρ), τ the
  integrated autocorrelation time of the indicator "below the median",
  1 + 2 Σ (2/π)·asin(ρᵏ) (`steady.median_indicator_tau`).

The measured σ is read back from each round's interval: the profiler's standard error of
the median is sqrt(π/2)·σ/sqrt(effective_steps) (effective_steps = steps / τ), so
σ = se/median · sqrt(effective_steps / (π/2)); the run's σ is the median over its rounds
(noise is the GPU's, not the cell's; a round whose interval drift or the KV slope widened
does not move it). ρ is the run's rounds' lag-1 estimates pooled by inverse variance
(`steady.Ar1Prior.pooled`), never below 0. The simulator's own σ and ρ give a second
minimum independent of the profiler's estimates ("oracle").

Two targets: ±1 % on every grid point (the issue's), and the precision each round really
reached when that is wider (a round stopped by `--max-steady-steps`): the first says
whether the profiler spends more than ±1 % needs, the second how efficiently it bought what
it delivered.

    .venv/bin/python bench/statistical_minimum.py /tmp/truth/h100-before.json
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from profiler_matrix import EFFECTS, cell_label, cell_order, merge_saved, our_runs_by_cell
from sps_operator.profiler.steady import MAX_AR1, Ar1Prior, median_indicator_tau
from sps_operator.profiler.sweep import ROUND_WARMUP_STEPS

Z95 = 1.959963984540054
TARGET_REL_HALF_WIDTH = 0.01
MEDIAN_VARIANCE_FACTOR = math.pi / 2  # var(median) / var(mean) for Gaussian noise
STATISTICS = ("mean", "median")


def required_steps(
    sigma_rel: float,
    rho: float,
    *,
    statistic: str = "median",
    rel_half_width: float = TARGET_REL_HALF_WIDTH,
    z: float = Z95,
) -> float:
    """Steps whose `statistic` has a ±`rel_half_width` CI (z) under Gaussian AR(1) noise of
    marginal relative scale `sigma_rel` and lag-1 correlation `rho` (clamped to [0, MAX_AR1])."""
    if sigma_rel < 0 or rel_half_width <= 0:
        raise ValueError(
            f"need sigma_rel >= 0 and rel_half_width > 0, got {sigma_rel}, {rel_half_width}"
        )
    rho = min(MAX_AR1, max(0.0, rho))
    iid = (z * sigma_rel / rel_half_width) ** 2
    if statistic == "mean":
        return iid * (1 + rho) / (1 - rho)
    if statistic == "median":
        return iid * MEDIAN_VARIANCE_FACTOR * median_indicator_tau(rho)
    raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")


def sigma_from_round(round_: dict[str, Any]) -> float:
    """The marginal relative noise scale a round's median interval implies (see module doc)."""
    median = float(round_["median_step_time"])
    se = float(round_["step_time_se"])
    ess = float(round_["effective_steps"])
    return se / median * math.sqrt(ess / MEDIAN_VARIANCE_FACTOR)


def pooled_ar1(rounds: Sequence[dict[str, Any]]) -> float:
    """The run's lag-1 correlation: its rounds' estimates pooled by inverse variance, ≥ 0."""
    prior = Ar1Prior.pooled(
        [(float(r["ar1"]), float(r["ar1_se"])) for r in rounds if r.get("ar1_se") is not None]
    )
    return max(0.0, prior.phi) if prior else 0.0


@dataclass(frozen=True)
class RunMinimum:
    spent: float  # GPU seconds the run used
    overhead: float  # warm-up + off-clock time + dropped steps: paid whatever the stopping rule
    # GPU seconds of the minimal steady steps: "mean"/"median" for ±1 % on every point,
    # "reached" (median) for the precision each round reached
    measure: dict[str, float]
    rho: float
    sigma: float
    ci_met: float  # share of the rounds that reached their CI target

    def minimum(self, statistic: str) -> float:
        return self.overhead + self.measure[statistic]

    def ratio(self, statistic: str) -> float:
        return self.spent / self.minimum(statistic)


def run_minimum(
    result: dict[str, Any], *, sigma: float | None = None, rho: float | None = None
) -> RunMinimum:
    """One saved matrix run (ours, with `fitted_rounds`) against its statistical minimum;
    `sigma`/`rho` replace the measured figures (the simulator's own, for the oracle)."""
    rounds = result["fitted_rounds"]
    run_rho = pooled_ar1(rounds) if rho is None else rho
    run_sigma = statistics.median(sigma_from_round(r) for r in rounds) if sigma is None else sigma
    reached = [max(TARGET_REL_HALF_WIDTH, float(r["ci_rel_width"]) / 2) for r in rounds]
    clock_start = min(float(r["clock_s"][0]) for r in rounds)
    clock_end = max(float(r["clock_s"][1]) for r in rounds)
    spent = float(result["gpu_seconds"])
    step_times = [float(r["median_step_time"]) for r in rounds]
    overhead = clock_start + (spent - clock_end) + ROUND_WARMUP_STEPS * math.fsum(step_times)
    measure = {
        stat: math.fsum(required_steps(run_sigma, run_rho, statistic=stat) * t for t in step_times)
        for stat in STATISTICS
    }
    measure["reached"] = math.fsum(
        required_steps(run_sigma, run_rho, rel_half_width=eps) * t
        for eps, t in zip(reached, step_times, strict=True)
    )
    ci_met = sum(bool(r.get("ci_met")) for r in rounds) / len(rounds)
    return RunMinimum(spent, overhead, measure, run_rho, run_sigma, ci_met)


def oracle_noise(result: dict[str, Any]) -> tuple[float, float]:
    """The simulator's own (σ, ρ) for a matrix run: its noise level and, on the AR(1)
    column, that coefficient (every other column runs with ρ = 0)."""
    sigma = float(result["noise"])
    return sigma, float(EFFECTS[result["effect"]].get("noise_ar1", 0.0))


def cell_rows(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell over its runs: spent against the minimum, and what the minimum rests on."""
    rows = []
    for (preset, noise, effect, kind), runs in our_runs_by_cell(results, "fitted_rounds").items():
        measured = [run_minimum(r) for r in runs]
        oracle = [run_minimum(r, sigma=oracle_noise(r)[0], rho=oracle_noise(r)[1]) for r in runs]
        rows.append(
            {
                "preset": preset,
                "noise": noise,
                "effect": effect,
                "kind": kind,
                "runs": len(runs),
                "spent": statistics.fmean(m.spent for m in measured),
                "overhead": statistics.fmean(m.overhead for m in measured),
                "sigma": statistics.fmean(m.sigma for m in measured),
                "ci_met": statistics.fmean(m.ci_met for m in measured),
                "rho": statistics.fmean(m.rho for m in measured),
                "min_median": statistics.fmean(m.minimum("median") for m in measured),
                "ratios_median": sorted(m.ratio("median") for m in measured),
                "ratios_mean": sorted(m.ratio("mean") for m in measured),
                "ratios_reached": sorted(m.ratio("reached") for m in measured),
                "ratios_oracle": sorted(m.ratio("median") for m in oracle),
            }
        )
    return sorted(rows, key=cell_order)


def print_rows(rows: Sequence[dict[str, Any]]) -> None:
    print(
        "| GPU | noise | effect | kind | runs | GPU s spent | of which overhead | σ | ρ "
        "| rounds CI met | minimum ±1 % (median) | spent / minimum: ±1 % median | ±1 % mean "
        "| reached precision | ±1 %, simulator's σ ρ |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def span(xs: Sequence[float]) -> str:
        return " ".join(f"{x:.2f}" for x in xs)

    for r in rows:
        print(
            f"| {cell_label(r)} | {r['runs']} | {r['spent']:.0f} | {r['overhead']:.0f} | "
            f"{r['sigma']:.1%} | {r['rho']:.2f} | {r['ci_met']:.0%} | {r['min_median']:.0f} | "
            f"{span(r['ratios_median'])} | {span(r['ratios_mean'])} | "
            f"{span(r['ratios_reached'])} | {span(r['ratios_oracle'])} |"
        )
    if not rows:
        return
    print()
    for label, key in (("±1 %", "ratios_median"), ("reached precision", "ratios_reached")):
        worst = [max(r[key]) for r in rows]
        print(
            f"{label}: every run ≤ 2× its minimum in {sum(w <= 2 for w in worst)}/{len(rows)} "
            f"cells (worst run {max(worst):.2f})"
        )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", nargs="+", type=Path, help="profiler_matrix.py --json files")
    ns = p.parse_args(argv)
    print_rows(cell_rows(merge_saved(ns.json, every_seed=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
