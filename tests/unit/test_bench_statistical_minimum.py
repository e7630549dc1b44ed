"""bench/statistical_minimum.py: the steps a ±1 % (95 %) interval needs, and a run against it."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from sps_operator.profiler.steady import median_indicator_tau
from sps_operator.profiler.sweep import ROUND_WARMUP_STEPS
from statistical_minimum import (
    required_steps,
    run_minimum,
    sigma_from_round,
)


def test_iid_mean_needs_the_textbook_sample_size() -> None:
    assert required_steps(0.03, 0.0, statistic="mean") == pytest.approx(
        (1.96 * 0.03 / 0.01) ** 2, rel=1e-4
    )
    assert required_steps(0.10, 0.0, statistic="mean", rel_half_width=0.02) == pytest.approx(
        (1.96 * 0.10 / 0.02) ** 2, rel=1e-4
    )


@pytest.mark.parametrize("rho", [0.3, 0.5, 0.8])
def test_ar1_inflates_the_mean_by_one_plus_rho_over_one_minus_rho(rho: float) -> None:
    ratio = required_steps(0.05, rho, statistic="mean") / required_steps(
        0.05, 0.0, statistic="mean"
    )
    assert ratio == pytest.approx((1 + rho) / (1 - rho))


def test_the_median_costs_pi_over_two_iid_and_its_indicator_time_when_correlated() -> None:
    iid_mean = required_steps(0.05, 0.0, statistic="mean")
    assert required_steps(0.05, 0.0) == pytest.approx(iid_mean * math.pi / 2)
    # at φ = 0.8 the median indicator's autocorrelation time (≈ 6) is below the mean's 9
    assert required_steps(0.05, 0.8) == pytest.approx(
        iid_mean * math.pi / 2 * median_indicator_tau(0.8)
    )
    assert median_indicator_tau(0.8) < 9


def test_negative_correlation_is_taken_as_independent() -> None:
    assert required_steps(0.05, -0.4) == required_steps(0.05, 0.0)


def _ar1_series(
    rng: np.random.Generator, reps: int, n: int, sigma: float, rho: float
) -> np.ndarray:
    """`reps` Gaussian AR(1) series of n steps, marginal sd `sigma` around 1."""
    x = np.empty((reps, n))
    x[:, 0] = rng.standard_normal(reps)
    innovation = math.sqrt(1 - rho * rho)
    for i in range(1, n):
        x[:, i] = rho * x[:, i - 1] + innovation * rng.standard_normal(reps)
    return 1.0 + sigma * x


@pytest.mark.parametrize(
    ("statistic", "rho"), [("mean", 0.0), ("mean", 0.6), ("median", 0.0), ("median", 0.6)]
)
def test_that_many_steps_give_a_one_percent_interval_95_percent_of_the_time(
    statistic: str, rho: float
) -> None:
    """Simulated: with the required n, the statistic lands within ±1 % of the truth in ≈ 95 % of
    series (a wrong inflation, e.g. none for ρ or the mean's for the median, lands far off)."""
    sigma = 0.04
    n = math.ceil(required_steps(sigma, rho, statistic=statistic))
    series = _ar1_series(np.random.default_rng(7), 3000, n, sigma, rho)
    estimate = series.mean(axis=1) if statistic == "mean" else np.median(series, axis=1)
    within = float(np.mean(np.abs(estimate - 1.0) <= 0.01))
    assert 0.93 <= within <= 0.97, (n, within)


def test_sigma_is_read_back_from_the_rounds_interval() -> None:
    sigma, ess, median = 0.05, 60.0, 0.02
    se = math.sqrt(math.pi / 2) * sigma * median / math.sqrt(ess)
    round_ = {"median_step_time": median, "step_time_se": se, "effective_steps": ess}
    assert sigma_from_round(round_) == pytest.approx(sigma)


def _round(
    step: float, sigma: float, clock: tuple[float, float], ci_rel_width: float
) -> dict[str, object]:
    ess = 100.0
    return {
        "median_step_time": step,
        "step_time_se": math.sqrt(math.pi / 2) * sigma * step / math.sqrt(ess),
        "effective_steps": ess,
        "ar1": 0.0,
        "ar1_se": 0.1,
        "clock_s": list(clock),
        "ci_rel_width": ci_rel_width,
        "ci_met": ci_rel_width <= 0.02,
    }


def test_a_run_is_priced_at_its_overheads_plus_the_minimal_steps() -> None:
    rounds = [_round(0.01, 0.03, (4.0, 6.0), 0.02), _round(0.02, 0.03, (7.0, 10.0), 0.04)]
    result = {"gpu_seconds": 12.0, "fitted_rounds": rounds}
    run = run_minimum(result)
    # warm-up before the first window, off-clock time after the last, dropped steps per round
    assert run.overhead == pytest.approx(4.0 + (12.0 - 10.0) + ROUND_WARMUP_STEPS * 0.03)
    n = required_steps(0.03, 0.0)
    assert run.measure["median"] == pytest.approx(n * 0.03)
    # the second round reached ±2 %: a quarter of the steps ±1 % needs
    assert run.measure["reached"] == pytest.approx(n * 0.01 + n / 4 * 0.02)
    assert run.ratio("median") == pytest.approx(12.0 / (run.overhead + n * 0.03))
    assert run.ci_met == 0.5
    oracle = run_minimum(result, sigma=0.06, rho=0.0)
    assert oracle.measure["median"] == pytest.approx(4 * run.measure["median"])
