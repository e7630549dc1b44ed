"""What one round measured: the step time at the reference context, and how sure we are (pure).

A round's steps are not independent draws of one number. As its requests age, attention
reads more KV cache, so steps get slower (KV growth); after an idle gap the clocks ramp up,
so the first steps are slow (warming); noise is autocorrelated from step to step. The
estimate here accounts for each:

* **KV growth is measured out.** Step time is taken as linear in the context per request
  over the window: the slope is Theil–Sen's (the median of the pairwise slopes: robust to
  outliers), and the estimate is the median of the detrended steps at the reference
  context — the context the table describes. The slope's own uncertainty, carried to the
  reference context, is part of the interval.
* **Drift that is not KV growth** — a falling trend (clocks still warming), or a bend the
  line cannot follow (a throttle step, a ramp's tail) — disqualifies a window; the caller
  tries later starts (trimming the drift) and otherwise keeps measuring.
* **Autocorrelation** enters through an effective sample size: the lag-1 correlation of the
  steps is read from their first differences (blind to trends and steps, which would
  otherwise read as correlation and hide themselves), and the median's order-statistic
  interval is widened by the integrated autocorrelation time of the indicator "below the
  median".
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# A window is judged on halves and thirds: fewer steps than this in one of them says nothing.
MIN_STEPS_PER_PART = 8
# The running sum of residual signs wanders like a Brownian bridge of scale sqrt(n·tau)
# without drift; P(max excursion > 1.8 sqrt(n·tau)) ≈ 2·exp(-2·1.8²) ≈ 0.3 %.
DRIFT_EXCURSION = 1.8
# The lag-1 correlation estimate is raised by this many of its standard errors before use,
# so a short series does not talk itself into independence.
AR1_MARGIN_SE = 0.5
MAX_AR1 = 0.97
# The warm-up judges the clocks settled only over at least this much step time (model
# seconds): a ramp decaying over seconds is invisible under noise in a shorter span.
MIN_SETTLE_SECONDS = 3.0
# ... and, when no fall is significant, only if the fall's confidence bound is within this
# many tolerances: "no evidence of a ramp" from a noisy series is not "no ramp".
QUIET_FALL_TOLERANCES = 6.0
# The KV slope's pairwise slopes are taken over at most this many points (block means).
SEN_MAX_POINTS = 300
# A round's own lag-1 correlation is pooled with the run's earlier rounds' (`Ar1Prior`)
# unless the two differ by more than this many standard errors (then the GPU's noise is
# not what it was, and the round's own estimate stands).
AR1_POOL_Z = 2.0
# The pooled estimate's standard error is never taken below this: cells may differ a
# little in how their noise correlates.
AR1_PRIOR_MIN_SE = 0.05


def _median_rank_bounds(n: int, z: float, tau: float) -> tuple[int, int]:
    """Order-statistic indices of the median's CI: n/2 ± z·sqrt(n·tau)/2."""
    half = z * math.sqrt(n * tau) / 2
    return max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half))


def median_ci(values: Sequence[float], z: float, tau: float = 1.0) -> tuple[float, float, float]:
    """Median and its distribution-free CI; `tau` ≥ 1 widens it for autocorrelation."""
    ordered = sorted(values)
    med = statistics.median(ordered)
    if len(ordered) < 3:
        return med, ordered[0], ordered[-1]
    lo, hi = _median_rank_bounds(len(ordered), z, tau)
    return med, ordered[lo], ordered[hi]


def ar1_from_differences(values: Sequence[float]) -> tuple[float, float]:
    """(φ estimate, its standard error) of an AR(1) from its first differences.

    Differences of an AR(1) with coefficient φ have lag-1 correlation (φ − 1)/2 whatever
    the level: a trend only shifts their mean (removed) and a level step or an outlier
    touches one or two of them (winsorised), where the series itself would read a trend or
    a step as strong autocorrelation.
    """
    diffs = [b - a for a, b in itertools.pairwise(values)]
    m = len(diffs) - 1
    if m < 3:
        return 0.0, 1.0
    centre = statistics.median(diffs)
    spread = 3 * 1.4826 * statistics.median(abs(d - centre) for d in diffs)
    clipped = [max(-spread, min(spread, d - centre)) for d in diffs]
    power = sum(d * d for d in clipped)
    if power == 0:
        return 0.0, 1.0
    rho = sum(a * b for a, b in itertools.pairwise(clipped)) / power
    phi = max(-1.0, min(1.0, 1 + 2 * rho))
    # Bartlett's variance of a lag-1 correlation of an MA(1), carried through φ = 1 + 2ρ.
    se = 2 * math.sqrt(max(1 - 3 * rho * rho + 4 * rho**4, 0.1) / m)
    return phi, se


def sen_slope(
    xs: Sequence[float], ys: Sequence[float], z: float, tau: float = 1.0
) -> tuple[float, float]:
    """(Theil–Sen slope, its standard error): the median of the pairwise slopes, and the
    half-width of Sen's distribution-free interval over z (Kendall's S has variance
    n(n−1)(2n+5)/18; `tau` ≥ 1 widens it for autocorrelation).

    Twice as efficient as the slope between the medians of two halves, as robust to
    outliers. Series longer than `SEN_MAX_POINTS` are thinned to block means first (a
    line stays a line), keeping the pairs O(SEN_MAX_POINTS²).
    """
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    block = math.ceil(len(x) / SEN_MAX_POINTS)
    if block > 1:
        usable = len(x) // block * block
        x = x[:usable].reshape(-1, block).mean(axis=1)
        y = y[:usable].reshape(-1, block).mean(axis=1)
    n = len(x)
    i, j = np.triu_indices(n, k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    slopes = np.sort((y[j] - y[i])[keep] / dx[keep])
    count = len(slopes)
    if count < 3:
        return 0.0, math.inf
    c = z * math.sqrt(tau * n * (n - 1) * (2 * n + 5) / 18)
    lo = max(0, math.floor((count - c) / 2))
    hi = min(count - 1, math.ceil((count + c) / 2))
    return float(np.median(slopes)), float(slopes[hi] - slopes[lo]) / (2 * z)


def median_indicator_tau(phi: float) -> float:
    """Integrated autocorrelation time of 1{x < median} for a Gaussian AR(1) with lag-1 φ:
    1 + 2 Σ_k (2/π)·asin(φ^k)."""
    if phi <= 0:
        return 1.0
    total, power = 1.0, phi
    while power > 1e-6:
        total += 2 * (2 / math.pi) * math.asin(power)
        power *= phi
    return total


@dataclass(frozen=True)
class WindowEstimate:
    """One candidate window's estimate (all times in seconds, relative figures unitless)."""

    start: int
    num_steps: int
    median: float  # step time at the reference context
    half_width: float  # CI half-width (slope and remaining drift included)
    drift_rel: float  # drift the KV line cannot explain, relative to the median
    drifting: bool  # that drift is both significant and material
    tau: float  # integrated autocorrelation time used
    ar1: float  # the window's own estimate of the steps' lag-1 correlation
    ar1_se: float  # its standard error
    kv_slope: float  # seconds per context token per request

    @property
    def ess(self) -> float:
        return self.num_steps / self.tau

    @property
    def rel_half_width(self) -> float:
        return self.half_width / self.median if self.median > 0 else math.inf


def rank_tau(phi: float) -> float:
    """Integrated autocorrelation time of the ranks of a Gaussian AR(1) with lag-1 φ (their
    correlation at lag k is (6/π)·asin(φ^k / 2)): what widens a rank statistic's variance."""
    phi = min(MAX_AR1, max(0.0, phi))
    total, power = 1.0, phi
    while power > 1e-6:
        total += 2 * (6 / math.pi) * math.asin(power / 2)
        power *= phi
    return total


def _largest_sign_excursion(centred: Sequence[float]) -> tuple[int, float]:
    """(split index, |running sum of signs| there) at the largest excursion, keeping at
    least `MIN_STEPS_PER_PART` steps on each side."""
    total, best, split = 0, 0, len(centred) // 2
    for index, value in enumerate(centred[:-MIN_STEPS_PER_PART], start=1):
        total += (value > 0) - (value < 0)
        if index >= MIN_STEPS_PER_PART and abs(total) > best:
            best, split = abs(total), index
    return split, float(best)


@dataclass(frozen=True)
class Ar1Prior:
    """The steps' lag-1 correlation as the run's earlier rounds measured it, pooled.

    How step noise correlates from step to step is the GPU's (clock and power management,
    the host), not the cell's. One round of 240 steps at φ = 0.8 reads φ anywhere from 0.63
    to 0.95, its autocorrelation time from 4 to 45: pooled over the run's rounds, every
    round's interval is as wide as the noise makes it, not as its own estimate scatters."""

    phi: float
    se: float

    @staticmethod
    def pooled(estimates: Sequence[tuple[float, float]]) -> Ar1Prior | None:
        """Inverse-variance mean of (φ, standard error) pairs; None without any."""
        weights = [(phi, 1.0 / (se * se)) for phi, se in estimates if se > 0 and math.isfinite(se)]
        total = math.fsum(w for _, w in weights)
        if not weights or total <= 0:
            return None
        phi = math.fsum(p * w for p, w in weights) / total
        return Ar1Prior(phi, max(AR1_PRIOR_MIN_SE, 1.0 / math.sqrt(total)))


@dataclass(frozen=True)
class _Correlation:
    own: float  # the series' own lag-1 correlation
    own_se: float
    used: float  # pooled with the run's prior when the two agree
    tau: float  # integrated autocorrelation time of the median indicator, from `used`


def _step_correlation(values: Sequence[float], prior: Ar1Prior | None = None) -> _Correlation:
    phi_hat, phi_se = ar1_from_differences(values)
    phi, se = phi_hat, phi_se
    if prior is not None and abs(phi_hat - prior.phi) <= AR1_POOL_Z * math.hypot(phi_se, prior.se):
        w_own, w_prior = 1.0 / (phi_se * phi_se), 1.0 / (prior.se * prior.se)
        phi = (w_own * phi_hat + w_prior * prior.phi) / (w_own + w_prior)
        se = 1.0 / math.sqrt(w_own + w_prior)
    tau = median_indicator_tau(min(MAX_AR1, max(0.0, phi + AR1_MARGIN_SE * se)))
    return _Correlation(phi_hat, phi_se, phi, tau)


def _parts(values: Sequence[float], k: int) -> list[Sequence[float]]:
    n = len(values)
    return [values[i * n // k : (i + 1) * n // k] for i in range(k)]


def estimate_window(
    times: Sequence[float],
    contexts: Sequence[float],
    *,
    reference_context: float,
    z: float,
    tolerance_rel: float,
    start: int = 0,
    ar1_prior: Ar1Prior | None = None,
) -> WindowEstimate:
    """The step time at `reference_context` over this window, and whether the window drifts
    beyond `tolerance_rel` (relative) in a way linear KV growth does not explain."""
    n = len(times)
    # The noise's autocorrelation, read from differences: a line only shifts their mean.
    correlation = _step_correlation(times, ar1_prior)
    tau = correlation.tau
    slope, se_slope = sen_slope(contexts, times, z, rank_tau(correlation.used))
    # A falling step time is never KV growth: keep it in the residuals, where it shows as drift.
    kv_slope = max(slope, 0.0)
    residuals = [
        t - kv_slope * (c - reference_context) for t, c in zip(times, contexts, strict=True)
    ]
    med, lo, hi = median_ci(residuals, z, tau)
    half = (hi - lo) / 2

    def median_se(part: Sequence[float]) -> float:
        if len(part) < 3:
            return math.inf
        _m, p_lo, p_hi = median_ci(part, z, tau)
        return (p_hi - p_lo) / (2 * z)

    # Slope uncertainty, carried to the reference context — also when the slope came out
    # negative and was clipped to 0: dropping the term there made those windows look
    # narrowest, so the stopping rule took them first (a window below the reference
    # context then read low: 60 % coverage for rounds that stopped early on KV growth).
    centre_ctx = statistics.fmean(contexts)
    if math.isfinite(se_slope):
        half = math.hypot(half, z * abs(centre_ctx - reference_context) * se_slope)
    # Drift the line cannot explain — a fall (clocks warming), a step (throttling), a bend —
    # leaves runs of same-signed residuals: the largest excursion of their running sum.
    split, excursion = _largest_sign_excursion([r - med for r in residuals])
    before, after = residuals[:split], residuals[split:]
    shift = statistics.median(before) - statistics.median(after)
    se_shift = math.hypot(median_se(before), median_se(after))
    drift = abs(shift)
    significant = excursion > DRIFT_EXCURSION * math.sqrt(n * tau)
    drifting = significant and drift > tolerance_rel * med
    # Drift beyond what noise explains widens the interval: the median may sit anywhere
    # along it (the noise part is in the interval already).
    excess = max(0.0, drift - z * se_shift) if significant else 0.0
    return WindowEstimate(
        start=start,
        num_steps=n,
        median=med,
        half_width=half + excess,
        drift_rel=drift / med if med > 0 else math.inf,
        drifting=drifting,
        tau=tau,
        ar1=correlation.own,
        ar1_se=correlation.own_se,
        kv_slope=kv_slope,
    )


@dataclass(frozen=True)
class SteadyStats:
    """The chosen window of a round and whether it meets the stopping rule."""

    done: bool
    window: WindowEstimate
    z: float

    @property
    def window_start(self) -> int:
        return self.window.start

    @property
    def num_steps(self) -> int:
        return self.window.num_steps

    @property
    def median(self) -> float:
        return self.window.median

    @property
    def ci_low(self) -> float:
        return self.window.median - self.window.half_width

    @property
    def ci_high(self) -> float:
        return self.window.median + self.window.half_width

    @property
    def rel_width(self) -> float:
        return 2 * self.window.rel_half_width

    @property
    def drift(self) -> float:
        return self.window.drift_rel

    @property
    def se(self) -> float:
        """Standard error of the estimate (normal approximation of the CI)."""
        return self.window.half_width / self.z


def steady_stats(
    step_times: Sequence[float],
    contexts: Sequence[float],
    *,
    reference_context: float,
    ci_rel_width: float,
    min_steps: int,
    z: float,
    ar1_prior: Ar1Prior | None = None,
) -> SteadyStats | None:
    """The longest window, from a start on a coarse grid, that does not drift and whose CI is
    narrower than `ci_rel_width`; `done` is False when none qualifies yet, and the longest
    window that does not drift (else the one with the narrowest interval) is described.
    `ar1_prior`: the run's earlier rounds' step correlation, pooled with the window's own."""
    n = len(step_times)
    if n == 0:
        return None
    stride = max(1, n // 16)
    longest_quiet: WindowEstimate | None = None
    best: WindowEstimate | None = None
    for start in range(0, max(1, n - min_steps + 1), stride):
        if n - start < max(min_steps, 1):
            break
        estimate = estimate_window(
            step_times[start:],
            contexts[start:],
            reference_context=reference_context,
            z=z,
            tolerance_rel=ci_rel_width / 2,
            start=start,
            ar1_prior=ar1_prior,
        )
        if not estimate.drifting and estimate.rel_half_width * 2 <= ci_rel_width:
            return SteadyStats(True, estimate, z)
        if longest_quiet is None and not estimate.drifting:
            longest_quiet = estimate
        if best is None or estimate.rel_half_width < best.rel_half_width:
            best = estimate
    # No window meets the CI: describe the longest one that does not drift. Picking the
    # narrowest interval instead would pick a window by its noise (a later start whose
    # steps happen to agree) and throw the rest away: 15 % more error at φ = 0.8.
    if longest_quiet is not None:
        return SteadyStats(False, longest_quiet, z)
    if best is None:
        best = estimate_window(
            step_times,
            contexts,
            reference_context=reference_context,
            z=z,
            tolerance_rel=ci_rel_width / 2,
            ar1_prior=ar1_prior,
        )
    return SteadyStats(False, best, z)


# A round is cut into at most this many blocks to look for a rise between neighbours.
RISE_BLOCKS = 8
# A rise must exceed this many standard errors of the two blocks' medians: a false alarm
# costs a round measured again.
RISE_Z = 3.0
# ... and this many between blocks two apart (the jump across a block a cap set in inside):
# at `RISE_Z` they doubled the false alarms (`bench/rise_false_alarms.py`); at 4 the rates
# are as without them, and a +20 % cap at 3 % noise shows in 200 of 200 rounds, not 142.
RISE_Z_TWO_APART = 4.0
# Checked while the round runs (at every poll), only once each block holds this many steps:
# from fewer, the blocks' intervals are too coarse, and at φ = 0.8 one round in eight showed
# a rise at two polls in a row from 48 steps on, under 1 % from 120 (i.i.d. and φ = 0.3 with
# outliers: 1-2 %, as the end-of-round check alone).
LIVE_RISE_BLOCK_STEPS = 15


def _material(excess: float, noise: float, ci_rel_width: float, level: float) -> bool:
    """Is a rise beyond its noise and over half the CI target (a rise that matters)?"""
    return excess > noise and excess > ci_rel_width / 2 * level


def level_rise(
    times: Sequence[float],
    *,
    ci_rel_width: float,
    z: float,
    ar1_prior: Ar1Prior | None = None,
) -> float | None:
    """How far the round's step times jumped up between neighbouring stretches beyond the
    round's steady trend (relative), or None when no jump is significant and material.

    A round that straddles a throttle window (a power or thermal clock cap) has slower steps
    after the cap sets in, or a slow stretch in its middle. The stopping rule trims only a
    *leading* stretch, so it would describe a window that holds the cap, or one entirely
    inside it, and the KV line may lean to absorb a late one: the cap would be averaged
    into the cell. Here the round is cut into blocks; KV growth (linear in the steps, as
    every request ages together) moves each block's median by the same amount, the median
    of the differences, and a cap is a difference far above it. The caller measures the
    cell again.
    """
    blocks = min(RISE_BLOCKS, len(times) // MIN_STEPS_PER_PART)
    if blocks < 4:
        return None
    tau = _step_correlation(times, ar1_prior).tau
    size = len(times) // blocks
    parts = [times[i * size : (i + 1) * size] for i in range(blocks)]
    cis = [median_ci(part, z, tau) for part in parts]
    medians = [m for m, _lo, _hi in cis]
    ses = [(hi - lo) / (2 * z) for _m, lo, hi in cis]
    trend = statistics.median(b - a for a, b in itertools.pairwise(medians))
    level = statistics.median(times)
    # Neighbours, and blocks two apart: a cap that sets in mid-block leaves that block's
    # median between the two levels, and its wide interval can hide both halves of the jump.
    pairs = [(i, i + 1) for i in range(blocks - 1)] + [(i, i + 2) for i in range(blocks - 2)]
    worst: float | None = None
    for i, j in pairs:
        excess = medians[j] - medians[i] - (j - i) * trend
        z_pair = RISE_Z if j == i + 1 else RISE_Z_TWO_APART
        if _material(excess, z_pair * math.hypot(ses[i], ses[j]), ci_rel_width, level):
            worst = max(worst or 0.0, excess / level)
    return worst


# The effective-steps stop (`stopping.round_finished`) waits while the round's last this many
# steps read slower than the steps before them: a clock cap setting in at the round's end,
# which the blocks of `level_rise` are too coarse to show yet. A false alarm costs only the
# steps up to the next poll, so its threshold is lower than a rise's (`RISE_Z`).
TAIL_STEPS = 16
TAIL_Z = 2.0


def tail_rise(
    times: Sequence[float],
    *,
    ci_rel_width: float,
    z: float,
    ar1_prior: Ar1Prior | None = None,
    excess_z: float = TAIL_Z,
) -> float | None:
    """How much slower (relative) the series' last `TAIL_STEPS` steps read than the steps
    before them, beyond the series' steady trend (KV growth: the median difference between
    neighbouring blocks of as many steps), or None when not beyond `excess_z` standard
    errors and half the CI target."""
    blocks = len(times) // TAIL_STEPS
    if blocks < 4:
        return None
    tau = _step_correlation(times, ar1_prior).tau
    tail, head = times[-TAIL_STEPS:], times[:-TAIL_STEPS]
    starts = range(len(times) - blocks * TAIL_STEPS, len(times), TAIL_STEPS)
    block_medians = [statistics.median(times[i : i + TAIL_STEPS]) for i in starts]
    per_step = statistics.median(b - a for a, b in itertools.pairwise(block_medians)) / TAIL_STEPS
    tail_med, tail_lo, tail_hi = median_ci(tail, z, tau)
    head_med, head_lo, head_hi = median_ci(head, z, tau)
    # The tail's centre lies this many steps after the head's.
    expected = head_med + per_step * len(times) / 2
    excess = tail_med - expected
    noise = excess_z * math.hypot(tail_hi - tail_lo, head_hi - head_lo) / (2 * z)
    level = statistics.median(times)
    return excess / level if _material(excess, noise, ci_rel_width, level) else None


def _third_medians(times: Sequence[float], z: float) -> tuple[list[float], list[float]]:
    """The medians of the series' thirds and their standard errors (autocorrelation from
    the last third)."""
    parts = _parts(times, 3)
    tau = _step_correlation(parts[-1]).tau
    medians, ses = [], []
    for part in parts:
        med, lo, hi = median_ci(part, z, tau)
        medians.append(med)
        ses.append((hi - lo) / (2 * z))
    return medians, ses


def still_falling(times: Sequence[float], *, z: float) -> bool:
    """Do the step times still fall, beyond noise, from the series' middle third to its
    last? (What a live clock ramp shows, and one that is over does not.)"""
    if len(times) < 6 * MIN_STEPS_PER_PART:
        return False
    medians, ses = _third_medians(times, z)
    return medians[1] - medians[2] > z * math.hypot(ses[1], ses[2])


def _settled_thirds(
    medians: Sequence[float], ses: Sequence[float], *, z: float, tolerance_rel: float
) -> int | None:
    """From the medians of a series' thirds: in which third (1 or 2) the clocks already
    read level, or None while they may still be ramping (`clocks_settled`)."""
    d1, d2 = medians[0] - medians[1], medians[1] - medians[2]
    late_noise = math.hypot(ses[1], ses[2])
    fall, fall_noise = d1 + d2, math.hypot(ses[0], ses[2])
    if (
        d2 <= z * late_noise
        and fall <= z * fall_noise
        and max(fall, 0.0) + z * fall_noise <= QUIET_FALL_TOLERANCES * tolerance_rel * medians[2]
    ):
        return 1  # no fall from the second third to the last
    d2_high = max(d2, 0.0) + z * late_noise
    if d1 <= d2_high:
        return None  # not decaying yet, or too noisy to tell how fast
    # A geometric ramp whose excess is a, a·r, a·r² at the thirds' middles has a·r^2.5 left
    # at the series' end and a·r^1.5 at the last third's start; d2 = a·r·(1 − r).
    r = d2_high / d1
    if d2_high * r**0.5 / (1 - r) <= tolerance_rel * medians[2]:
        return 2  # level from the last third's start
    if d2_high * r**1.5 / (1 - r) <= tolerance_rel * medians[2]:
        return 3  # level only at the end
    return None


def level_from(times: Sequence[float], *, z: float, tolerance_rel: float) -> int | None:
    """The first step from which a series the settling test passed (`clocks_settled`)
    reads level: its second third's start when no fall shows from there to the end, its
    last third's start when what is left of the ramp there is within `tolerance_rel`;
    None when only the end is level. What lets the steps of an earlier warm-up round count
    in the cell's measurement: those after this point, no more (the ramp's own steps
    would read slow)."""
    if len(times) < 6 * MIN_STEPS_PER_PART:
        return None
    medians, ses = _third_medians(times, z)
    third = _settled_thirds(medians, ses, z=z, tolerance_rel=tolerance_rel)
    if third is None or third == 3:
        return None
    return third * len(times) // 3


def clocks_settled(
    times: Sequence[float],
    *,
    z: float,
    tolerance_rel: float,
    min_seconds: float = MIN_SETTLE_SECONDS,
) -> bool:
    """Has a clock ramp after idle died down enough that rounds measure warm clocks?

    Over the whole series so far, in thirds: while the step time falls from the second third
    to the last, or from the first to the last, by more than noise, the clocks are warming.
    A ramp decays geometrically, so from the fall between the first two thirds (d1) and the
    last two (d2) what is left of it at the end is about d2·r^1.5/(1 − r), r = d2/d1; settled
    when that is within `tolerance_rel`, with d2 taken at the top of its confidence interval
    (a noisy small d2 must not talk a live ramp into "settled").

    "No fall beyond noise" is only evidence over a span a ramp can show in: a ramp that
    decays over seconds falls by a fraction of the noise in the first second, so the series
    must cover at least `min_seconds` of step time (and 48 steps) before it is judged, and
    the fall from the first third to the last must also be bounded (top of its interval)
    by a few tolerances, so a noisy series keeps warming until it could have shown a ramp.
    """
    if len(times) < 6 * MIN_STEPS_PER_PART or math.fsum(times) < min_seconds:
        return False
    medians, ses = _third_medians(times, z)
    return _settled_thirds(medians, ses, z=z, tolerance_rel=tolerance_rel) is not None
