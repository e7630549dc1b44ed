"""How good is one round's estimate: error, interval coverage and steps, per noise case.

Offline (no server, no profiler run): a round's steady steps are drawn as the simulator
draws them (lognormal noise with median 1, AR(1) on the log scale, optional outliers, step
time linear in the KV context per request), the stopping rule judges them every
`--poll-steps` steps as the runner does (`StoppingRule` → `profiler.steady.steady_stats`)
until it is met or `--max-steps` are spent, and the estimate is compared with the truth at
the reference context. Prompts are sized as the runner sizes them: the window is centred on
the reference context for a round as long as the median of the last three (96 steps for
the first, `sweep.EXPECTED_STEADY_STEPS`).

Per case: rounds that met the CI, mean steps, grid-free error (RMS and bias, relative), how
often the reported 95 % interval held the truth, and how wide the intervals are (the widest
of a run is what the table's error bound carries). `--pool` pools the steps' lag-1
correlation over a run's earlier rounds (`steady.Ar1Prior`), as the runner does. With
`--alternatives`, also the error of other statistics over the whole window (a trimmed mean
of log step times, the Hodges–Lehmann estimate): what changing the round's statistic would
buy.

    .venv/bin/python bench/round_estimator.py --rounds 400
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sps_operator.profiler.steady import Ar1Prior, SteadyStats, estimate_window, steady_stats
from sps_operator.profiler.sweep import (
    DEFAULT_CI_LEVEL_Z,
    DEFAULT_CI_REL_WIDTH,
    DEFAULT_MAX_STEADY_STEPS,
    EXPECTED_STEADY_STEPS,
    MIN_STEADY_STEPS_FLOOR,
)

REFERENCE_CONTEXT = 300.0
# Rounds of one run (the matrix's additive sweep: 9 batch sizes × 4 fracs): the widest
# interval of a run is what the table's error bound carries.
RUN_ROUNDS = 36
STEP_SECONDS = 0.01


@dataclass(frozen=True)
class Case:
    name: str
    cv: float
    phi: float
    kv_rel: float  # step time's relative growth per KV token per request
    outliers: float = 0.0


CASES = (
    Case("3% iid", 0.03, 0.0, 0.0),
    Case("3% φ0.3 + KV growth", 0.03, 0.3, 1.6e-4),
    Case("10% iid", 0.10, 0.0, 0.0),
    Case("10% φ0.3 + 3% outliers", 0.10, 0.3, 1.6e-4, 0.03),
    Case("10% φ0.8 (AR(1))", 0.10, 0.8, 1.6e-4),
)


def draw_round(
    case: Case, rng: random.Random, n: int, first_context: float
) -> tuple[list[float], list[float]]:
    sigma = math.sqrt(math.log1p(case.cv * case.cv))
    z = rng.gauss(0.0, 1.0)
    times, contexts = [], []
    for d in range(n):
        z = case.phi * z + math.sqrt(1 - case.phi * case.phi) * rng.gauss(0.0, 1.0)
        context = first_context + d
        factor = math.exp(sigma * z)
        if case.outliers and rng.random() < case.outliers:
            factor *= rng.uniform(1.5, 3.0)
        times.append(STEP_SECONDS * (1 + case.kv_rel * (context - REFERENCE_CONTEXT)) * factor)
        contexts.append(float(context))
    return times, contexts


def judge_as_the_runner(
    times: Sequence[float],
    contexts: Sequence[float],
    poll: int,
    max_steps: int,
    prior: Ar1Prior | None = None,
) -> tuple[SteadyStats, int]:
    stats: SteadyStats | None = None
    seen = MIN_STEADY_STEPS_FLOOR
    while True:
        seen = min(seen, max_steps)
        stats = steady_stats(
            times[:seen],
            contexts[:seen],
            reference_context=REFERENCE_CONTEXT,
            ci_rel_width=DEFAULT_CI_REL_WIDTH,
            min_steps=MIN_STEADY_STEPS_FLOOR,
            z=DEFAULT_CI_LEVEL_Z,
            ar1_prior=prior,
        )
        assert stats is not None
        if stats.done or seen >= max_steps:
            return stats, seen
        seen += poll


def detrended_logs(times: Sequence[float], contexts: Sequence[float]) -> np.ndarray:
    whole = estimate_window(
        times,
        contexts,
        reference_context=REFERENCE_CONTEXT,
        z=DEFAULT_CI_LEVEL_Z,
        tolerance_rel=0.01,
    )
    t, c = np.asarray(times), np.asarray(contexts)
    return np.log(t - whole.kv_slope * (c - REFERENCE_CONTEXT))


def trimmed_log_mean(times: Sequence[float], contexts: Sequence[float], cut: float = 0.1) -> float:
    logs = np.sort(detrended_logs(times, contexts))
    k = int(len(logs) * cut)
    return float(math.exp(logs[k : len(logs) - k].mean()))


def hodges_lehmann(times: Sequence[float], contexts: Sequence[float]) -> float:
    logs = detrended_logs(times, contexts)
    i, j = np.triu_indices(len(logs))
    return float(math.exp(np.median((logs[i] + logs[j]) / 2)))


def rms(values: Sequence[float]) -> float:
    return math.sqrt(statistics.fmean(v * v for v in values))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=400)
    p.add_argument("--poll-steps", type=int, default=16)
    p.add_argument("--max-steps", type=int, default=DEFAULT_MAX_STEADY_STEPS)
    p.add_argument("--alternatives", action="store_true")
    p.add_argument(
        "--pool",
        action="store_true",
        help="pool the step correlation over a run's earlier rounds, as the runner does",
    )
    ns = p.parse_args(argv)
    head = (
        "| case | CI met | steps | error RMS (bias) | 95 % CI held | CI width median "
        f"| widest CI of a run of {RUN_ROUNDS} (mean) |"
    )
    if ns.alternatives:
        head += " trimmed log mean RMS | Hodges–Lehmann RMS |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for case in CASES:
        rng = random.Random(1)
        held, met = 0, 0
        errors: list[float] = []
        steps: list[int] = []
        trimmed: list[float] = []
        hl: list[float] = []
        widths: list[float] = []
        correlations: list[tuple[float, float]] = []
        for index in range(ns.rounds):
            if index % RUN_ROUNDS == 0:
                correlations = []  # a new run
            expected = int(statistics.median(steps[-3:])) if steps else EXPECTED_STEADY_STEPS
            first_context = REFERENCE_CONTEXT - expected // 2
            times, contexts = draw_round(case, rng, ns.max_steps, first_context)
            prior = Ar1Prior.pooled(correlations) if ns.pool else None
            stats, seen = judge_as_the_runner(times, contexts, ns.poll_steps, ns.max_steps, prior)
            correlations.append((stats.window.ar1, stats.window.ar1_se))
            widths.append(stats.rel_width)
            errors.append(stats.median / STEP_SECONDS - 1)
            held += stats.ci_low <= STEP_SECONDS <= stats.ci_high
            met += stats.done
            steps.append(seen)
            if ns.alternatives:
                trimmed.append(trimmed_log_mean(times[:seen], contexts[:seen]) / STEP_SECONDS - 1)
                hl.append(hodges_lehmann(times[:seen], contexts[:seen]) / STEP_SECONDS - 1)
        runs = [widths[i : i + RUN_ROUNDS] for i in range(0, len(widths), RUN_ROUNDS)]
        widest = statistics.fmean(max(run) for run in runs)
        row = (
            f"| {case.name} | {met / ns.rounds:.0%} | {statistics.fmean(steps):.0f} | "
            f"{rms(errors):.2%} ({statistics.fmean(errors):+.2%}) | {held / ns.rounds:.1%} | "
            f"{statistics.median(widths):.1%} | {widest:.1%} |"
        )
        if ns.alternatives:
            row += f" {rms(trimmed):.2%} | {rms(hl):.2%} |"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
