"""A GPU's clock ramp after idle, modelled, so rounds can be measured while it decays (pure).

After idle a GPU's clocks ramp up: steps are slower by a factor that decays over seconds,
`g(t) = 1 + A·exp(−t/τ)` on the run's clock (model seconds of decode steps since the first
warm-up step). It is a property of the GPU over time, not of a cell, so one (A, τ) holds for
every round of a run. Waiting it out costs ≈ τ·ln(A/tolerance) of load (≈ 17 s for a +30 %
ramp decaying over 5 s to 1 %); modelling it lets the sweep start after a few seconds.

A ramp cannot be read from one noisy series alone: its tail and the settled level trade off
(a fit's asymptote is the least determined thing about an exponential). So the warm-up's
cell is measured twice — the warm-up itself (the *probe*, on cold clocks) and the same round
again at the end of the sweep (the *anchor*, warm clocks) — with the same prompts and request
length, so at a given step index both hold the same KV context. One level and one KV slope
(per step index) are shared by the two; what differs is the ramp.

Data are chunk medians of `CHUNK_STEPS` steps (robust to outliers; log step times). (A, τ)
are fitted on a grid, the level and KV slope by least squares for each grid point, and the
confidence region of (A, τ) is every grid point whose residual sum of squares is within the
F-test threshold of the best, widened for autocorrelated chunks. A round's correction is the
mean log factor over its window at the best fit; its uncertainty is the range of that mean
over the region. A model whose residuals still drift (runs of same-signed residuals: a
throttle step, a ramp that is no exponential) is not used: the rounds keep their raw
medians, and their interval is widened by the ramp the probe still showed at its end.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from sps_operator.api.limits import MAX_STEP_SECONDS, MIN_STEP_SECONDS
from sps_operator.api.result import MAX_RAMP_CHUNKS, RampChunk

CHUNK_STEPS = 16
TAU_GRID_S = tuple(float(x) for x in np.exp(np.linspace(math.log(0.3), math.log(60.0), 48)))
AMPLITUDE_GRID = tuple(float(x) for x in np.linspace(0.0, 1.0, 101))
# χ²(1) at 95 %: the profile-likelihood threshold on the residual sum of squares for one
# figure at a time (a round's correction is one function of (A, τ)).
REGION_CHI2 = 3.841
# χ²(1) at 99.9 %: the evidence the warm-up asks before it starts the sweep on a ramp. It
# asks at every poll, so a 95 % region would start it on noise in one warm-up of several.
EVIDENCE_CHI2 = 10.83
# A run of same-signed residuals longer than this many √(n·τ) says the model does not fit
# (the drift check's threshold, `profiler.steady.DRIFT_EXCURSION`).
MISFIT_EXCURSION = 1.8
# The lag-1 correlation of chunk residuals is read from a few dozen chunks: capped, so a
# noisy estimate cannot inflate the region until it says nothing. Chunks of 16 steps of an
# AR(1) with φ = 0.8 correlate by ≈ 0.2.
MAX_CHUNK_AR1 = 0.5
MISFIT_Z = 2.33
# A model error below this (relative, per chunk) is no misfit worth refusing the model for.
MISFIT_FLOOR = 0.002
# Fewest chunks on each side before a model is fitted.
MIN_CHUNKS = 4
WINDOW_POINTS = 16

# (clock seconds at its middle, step index at its middle, log of the median step time): the
# result contract's type, which the operator validates.
Chunk = RampChunk


def chunk_series(
    times: Sequence[float], clocks: Sequence[float], chunk: int = CHUNK_STEPS
) -> list[Chunk]:
    """Consecutive chunks of `chunk` steps (a shorter tail dropped): the clock and step index
    at their middle and the log of their median step time."""
    if len(times) != len(clocks):
        raise ValueError("chunk_series: times and clocks differ in length")
    out: list[Chunk] = []
    for start in range(0, len(times) - chunk + 1, chunk):
        part = sorted(times[start : start + chunk])
        median = (part[(chunk - 1) // 2] + part[chunk // 2]) / 2
        if median <= 0:
            raise ValueError("chunk_series: step times must be positive")
        mid = start + (chunk - 1) / 2
        out.append((float(np.mean(clocks[start : start + chunk])), mid, math.log(median)))
    return out


def _chunk_tau(residuals: npt.NDArray[np.float64]) -> float:
    """Integrated autocorrelation time of a series of residuals, from the lag-1 correlation
    of its first differences (φ = 1 + 2ρ for an AR(1)): blind to a level step or a trend the
    model missed, which would otherwise read as correlation and excuse itself."""
    if len(residuals) < 5:
        return 1.0
    diffs = np.diff(residuals)
    diffs = diffs - diffs.mean()
    power = float(diffs @ diffs)
    if power <= 0:
        return 1.0
    phi = 1 + 2 * float(diffs[:-1] @ diffs[1:]) / power
    phi = min(max(phi, 0.0), MAX_CHUNK_AR1)
    return (1 + phi) / (1 - phi)


def _largest_excursion(signs: npt.NDArray[np.float64]) -> float:
    return float(np.max(np.abs(np.cumsum(signs)))) if len(signs) else 0.0


@dataclass(frozen=True)
class RampModel:
    """A fitted clock ramp: the best (A, τ), the region of (A, τ) the data allow, and
    whether the model fits at all."""

    amplitude: float
    tau_s: float
    region: tuple[tuple[float, float], ...]  # (A, τ) pairs
    fits: bool
    # What the probe still showed of a ramp at its end (relative, upper): the widening used
    # when the model does not fit.
    probe_end_excess: float

    def _mean_log(self, amplitude: float, tau: float, t0: float, t1: float) -> float:
        ts = np.linspace(t0, max(t0, t1), WINDOW_POINTS)
        return float(np.mean(np.log1p(amplitude * np.exp(-ts / tau))))

    def correction(self, t0: float, t1: float) -> tuple[float, float, float]:
        """(point, low, high) of the mean log slow-down over the clock window [t0, t1]."""
        point = self._mean_log(self.amplitude, self.tau_s, t0, t1)
        values = [self._mean_log(a, tau, t0, t1) for a, tau in self.region] or [point]
        return point, min(min(values), point), max(max(values), point)

    def to_dict(self) -> dict[str, Any]:
        amplitudes = [a for a, _ in self.region] or [self.amplitude]
        taus = [t for _, t in self.region] or [self.tau_s]
        return {
            "amplitude": self.amplitude,
            "tau_s": self.tau_s,
            "amplitude_range": [min(amplitudes), max(amplitudes)],
            "tau_s_range": [min(taus), max(taus)],
            "fits": self.fits,
            "probe_end_excess": self.probe_end_excess,
        }


def chunk_tau_from_step_ar1(phi: float, chunk: int = CHUNK_STEPS) -> float:
    """(1 + ρ)/(1 − ρ) for ρ the correlation of neighbouring chunk means of an AR(1) with
    lag-1 correlation φ (≈ 0.18 for chunks of 16 steps at φ = 0.8)."""
    phi = min(max(phi, 0.0), 0.99)
    if phi == 0:
        return 1.0
    m = chunk
    tail = 1 - phi**m
    cov = phi * tail * tail / (1 - phi) ** 2
    var = m * (1 + phi) / (1 - phi) - 2 * phi * tail / (1 - phi) ** 2
    rho = min(max(cov / var, 0.0), MAX_CHUNK_AR1)
    return (1 + rho) / (1 - rho)


def fit_ramp(
    probe: Sequence[Chunk],
    anchor: Sequence[Chunk],
    step_ar1: float | None = None,
    chi2: float = REGION_CHI2,
) -> RampModel | None:
    """The clock ramp from the warm-up's chunks (`probe`) and the same cell's chunks on warm
    clocks (`anchor`); None with fewer than `MIN_CHUNKS` probe chunks, or some anchor chunks
    but fewer than `MIN_CHUNKS`. Without an anchor the fit says whether there is a ramp at
    all (`ramp_evident`), not how much of it is left. `step_ar1`: the steps' lag-1
    correlation measured on many steps (the anchor round's `ar1`), for the chunks'
    correlation; without it, that is read from the chunks themselves (few, so noisily, and
    capped). `chi2`: the region's threshold (`REGION_CHI2`; `EVIDENCE_CHI2` for the
    warm-up's decision)."""
    if len(probe) < MIN_CHUNKS or 0 < len(anchor) < MIN_CHUNKS:
        return None
    data = np.array([*probe, *anchor], dtype=float)
    t, j, y = data[:, 0], data[:, 1], data[:, 2]
    n = len(y)
    taus = np.array(TAU_GRID_S)
    amps = np.array(AMPLITUDE_GRID)
    decay = np.exp(-t[None, :] / taus[:, None])  # τ × n
    ramp = np.log1p(amps[:, None, None] * decay[None, :, :])  # A × τ × n
    # The level and the KV slope (per step index) by least squares for every (A, τ); a
    # falling slope is never KV growth (a ramp's fall must not hide in it): level only then.
    rest = y[None, None, :] - ramp
    centred_j = j - j.mean()
    jj = float(centred_j @ centred_j)
    level = rest.mean(axis=-1, keepdims=True)
    slope = (rest @ centred_j) / jj if jj > 0 else np.zeros(rest.shape[:2])
    slope = np.maximum(slope, 0.0)[..., None]
    resid = rest - level - slope * centred_j
    sse = np.einsum("atn,atn->at", resid, resid)
    best_a, best_t = np.unravel_index(int(np.argmin(sse)), sse.shape)
    best_resid = resid[best_a, best_t]
    dof = max(n - 4, 1)
    # Correlation of the chunks, from each series on its own (a jump between them is none).
    if step_ar1 is not None and math.isfinite(step_ar1):
        tau_chunks = chunk_tau_from_step_ar1(step_ar1)
    else:
        tau_chunks = _chunk_tau(best_resid)
    threshold = sse[best_a, best_t] * (1 + chi2 * tau_chunks / dof)
    # Grown by one grid step each way: the grid's own resolution is uncertainty too.
    mask = sse <= threshold
    grown = mask.copy()
    grown[1:, :] |= mask[:-1, :]
    grown[:-1, :] |= mask[1:, :]
    grown[:, 1:] |= mask[:, :-1]
    grown[:, :-1] |= mask[:, 1:]
    inside = np.argwhere(grown)
    region = tuple((float(amps[a]), float(taus[k])) for a, k in inside)
    # Misfit: the residuals of each series, in time order, must not run to one side.
    fits = True
    for series in (best_resid[: len(probe)], best_resid[len(probe) :]):
        if not len(series):
            continue
        signs = np.sign(series - np.median(series))
        if _largest_excursion(signs) > MISFIT_EXCURSION * math.sqrt(len(series) * tau_chunks):
            fits = False
    # ... and the probe's scatter about the model must be the anchor's (warm clocks: the
    # noise alone), up to a one-sided 1 % F test (log F ≈ normal, variance 2/d₁ + 2/d₂).
    if len(anchor) >= MIN_CHUNKS:
        var_probe = float(np.var(best_resid[: len(probe)]))
        var_anchor = float(np.var(best_resid[len(probe) :]))
        spread = MISFIT_Z * math.sqrt(2 / (len(probe) - 1) + 2 / (len(anchor) - 1))
        if var_probe > (var_anchor + MISFIT_FLOOR**2) * math.exp(spread):
            fits = False
    # The probe's last quarter against the shared level (anchor level at the same step
    # index): what was left of a ramp when the sweep began, at the top of its interval.
    level = y - ramp[best_a, best_t] - best_resid  # the fitted level and KV line
    tail = max(1, len(probe) // 4)
    excess = y[len(probe) - tail : len(probe)] - level[len(probe) - tail : len(probe)]
    spread = float(np.std(best_resid[len(probe) :] if len(anchor) else best_resid))
    probe_end = max(0.0, float(np.mean(excess))) + 2 * spread * math.sqrt(tau_chunks / tail)
    return RampModel(
        amplitude=float(amps[best_a]),
        tau_s=float(taus[best_t]),
        region=region,
        fits=fits,
        probe_end_excess=math.expm1(probe_end),
    )


def ramp_evident(
    probe: Sequence[Chunk], tolerance_rel: float, step_ar1: float | None = None
) -> bool:
    """Does the warm-up so far show a decaying ramp that the model describes: no ramp at
    all is outside its confidence region, its residuals do not drift, and at the best fit
    more than `tolerance_rel` of it is left at the probe's end? Then the sweep may start on
    the ramp and be corrected for it (the warm-up's cell measured again at the end as the
    anchor). Otherwise the warm-up keeps waiting: a ramp that is over, or that noise may
    hide, is the settling test's to judge.

    Without the anchor, how much is left is the least certain thing about the fit (the
    settled level and the ramp's tail trade off), so it only decides whether modelling is
    worth it; what the rounds are corrected by comes from the anchored fit. `step_ar1`: the
    warm-up steps' lag-1 correlation (see `fit_ramp`)."""
    model = fit_ramp(probe, [], step_ar1, EVIDENCE_CHI2)
    if model is None or not model.fits or not model.region:
        return False
    if min(a for a, _ in model.region) <= 0:
        return False
    return model.amplitude * math.exp(-probe[-1][0] / model.tau_s) > tolerance_rel


def ramp_over_from(
    probe: Sequence[Chunk], tolerance_rel: float, step_ar1: float | None = None
) -> float | None:
    """From which run-clock second has every ramp the warm-up's chunks allow at most
    `tolerance_rel` left? The latest τ·ln(A/tolerance) over the fitted (A, τ) region (at
    the correction's 95 % threshold, `REGION_CHI2`; A within the tolerance counts from 0). None
    when the model does not describe the chunks (too few, or residuals that drift): then
    the model-free settling test (`steady.clocks_settled`) alone decides.

    What ends a warm-up whose first steps showed a short ramp that is over: the thirds of
    the settling test keep it in the first third's median, at 10 % noise for seconds after
    the clocks are level, while the model places it at the series' start. A ramp the data
    cannot place (a small A with a long τ, within the noise) stays in the region, and its
    tail keeps the warm-up going."""
    model = fit_ramp(probe, [], step_ar1, REGION_CHI2)
    if model is None or not model.fits or not model.region:
        return None
    return max(
        (tau * math.log(a / tolerance_rel) for a, tau in model.region if a > tolerance_rel),
        default=0.0,
    )


def thinned(chunks: Sequence[Chunk], limit: int = MAX_RAMP_CHUNKS) -> list[Chunk]:
    """At most `limit` of the chunks, evenly spread (every k-th, the last kept): what a
    round's line records of a very long warm-up or anchor (`--min-steady-steps`)."""
    step = max(1, math.ceil(len(chunks) / limit))
    if step == 1:
        return list(chunks)
    kept = list(chunks[len(chunks) - 1 :: -step])[::-1]
    return kept[-limit:]


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _numbers(value: Any, length: int) -> bool:
    """Is `value` a list of `length` finite JSON numbers?"""
    return (
        isinstance(value, list | tuple)
        and len(value) == length
        and all(_is_number(x) for x in value)
    )


def _chunks_of(value: Any, where: str) -> list[Chunk]:
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list of [clock, step, log step time] chunks")
    out: list[Chunk] = []
    for item in value:
        if not _numbers(item, 3):
            raise ValueError(f"{where} holds {item!r}, not a [clock, step, log step time] chunk")
        out.append((float(item[0]), float(item[1]), float(item[2])))
    return out


def _clock_window(round_: Mapping[str, Any], index: int) -> tuple[float, float] | None:
    value = round_.get("clock_s")
    if value is None:
        return None
    if not _numbers(value, 2) or value[0] > value[1]:
        raise ValueError(f"round {index} has clock_s={value!r}; it must be [start, end] seconds")
    return float(value[0]), float(value[1])


@dataclass(frozen=True)
class RunRamp:
    """One run's clock-ramp model and where its warm-up (the probe) ended on its clock."""

    model: RampModel
    probe_end_s: float


def _run_of(round_: Mapping[str, Any]) -> Any:
    return round_.get("clock_run")


def ramps_by_run(rounds: Sequence[Mapping[str, Any]]) -> dict[Any, RunRamp]:
    """Each run's ramp model (`clock_run` → model), from the run's first anchor round (a
    round carrying `clock_ramp`); runs whose record is too short for a model are absent."""
    out: dict[Any, RunRamp] = {}
    seen: set[Any] = set()
    for index, round_ in enumerate(rounds):
        ramp = round_.get("clock_ramp")
        if ramp is None or _run_of(round_) in seen:
            continue
        seen.add(_run_of(round_))
        if not isinstance(ramp, Mapping):
            raise ValueError(f"round {index} has clock_ramp={ramp!r}; it must be an object")
        probe = _chunks_of(ramp.get("probe"), f"round {index} clock_ramp.probe")
        anchor = _chunks_of(ramp.get("anchor"), f"round {index} clock_ramp.anchor")
        ar1 = round_.get("ar1")
        step_ar1 = float(ar1) if ar1 is not None and _is_number(ar1) else None
        model = fit_ramp(probe, anchor, step_ar1)
        if model is not None:
            out[_run_of(round_)] = RunRamp(model, max(c[0] for c in probe))
    return out


def stranded_rounds(
    rounds: Sequence[Mapping[str, Any]], ramps: Mapping[Any, RunRamp] | None = None
) -> list[int]:
    """Indices of rounds measured on a live clock ramp (`clock_on_ramp`) by a run without a
    ramp model: interrupted before its anchor (a `--resume` goes on with a clock of its
    own), or an anchor too short to fit one. Their slow-down cannot be taken out and their
    raw medians are slow by up to the ramp's amplitude: they are measured again, never
    fitted. `ramps`: `ramps_by_run(rounds)`, when the caller has it."""
    if ramps is None:
        ramps = ramps_by_run(rounds)
    return [
        i
        for i, r in enumerate(rounds)
        if r.get("clock_on_ramp") is True and _run_of(r) not in ramps
    ]


def correct_rounds(
    rounds: Sequence[Mapping[str, Any]], ramps: Mapping[Any, RunRamp] | None = None
) -> tuple[list[dict[str, Any]], RampModel | None]:
    """Rounds with the clock ramp taken out of their step times, and the model used (the one
    that corrected the most rounds when several runs have one).

    Each round measured on the ramp (`clock_on_ramp`, a clock window `clock_s`) of a run with
    a model gets its median divided by the model's mean slow-down over that window, and its
    CI widened by the model's uncertainty there (`clock_factor`, `clock_factor_low`/`_high`
    record it). When the model does not fit, medians stay raw and the CIs are widened by
    what the probe still showed at its end. Other rounds come back unchanged: those of a
    run without a model too (`stranded_rounds`: the fit leaves them out). A round on the
    ramp whose window starts before its run's warm-up ended is refused (ValueError): the
    sweep starts after the warm-up, and a window inside it would take a correction the
    warm-up's own steps never showed. `ramps`: `ramps_by_run(rounds)`, when the caller has it.
    """
    if ramps is None:
        ramps = ramps_by_run(rounds)
    out = [dict(r) for r in rounds]
    used: dict[Any, int] = {}
    for index, round_ in enumerate(out):
        if round_.get("clock_on_ramp") is not True or "median_step_time" not in round_:
            continue
        ramp = ramps.get(_run_of(round_))
        window = _clock_window(round_, index)
        if ramp is None or window is None:
            continue
        if window[0] < ramp.probe_end_s:
            raise ValueError(
                f"round {index} was measured on the clock ramp from {window[0]:g} s, before "
                f"its run's warm-up ended ({ramp.probe_end_s:g} s on the run clock); the "
                "rounds do not come from one sps-profiler run."
            )
        model = ramp.model
        if model.fits:
            point, low, high = model.correction(*window)
        else:
            point, low, high = 0.0, 0.0, math.log1p(model.probe_end_excess)
        used[_run_of(round_)] = used.get(_run_of(round_), 0) + 1
        if high <= 0 and low >= 0:
            continue
        median = float(round_["median_step_time"]) / math.exp(point)
        ci_low = float(round_.get("ci_low", round_["median_step_time"])) / math.exp(high)
        ci_high = float(round_.get("ci_high", round_["median_step_time"])) / math.exp(low)
        round_.update(
            median_step_time=median,
            steps_per_sec=1.0 / median,
            ci_low=min(ci_low, median),
            ci_high=max(ci_high, median),
            clock_factor=math.exp(point),
            clock_factor_low=math.exp(low),
            clock_factor_high=math.exp(high),
        )
        se = round_.get("step_time_se")
        if isinstance(se, int | float) and not isinstance(se, bool):
            round_["step_time_se"] = math.hypot(float(se), median * (high - low) / 2)
    if not ramps:
        return out, None
    main = max(used, key=lambda run: used[run]) if used else next(iter(ramps))
    return out, ramps[main].model


def usable_rounds(
    rounds: Sequence[Mapping[str, Any]], ramps: Mapping[Any, RunRamp] | None = None
) -> tuple[list[dict[str, Any]], RampModel | None]:
    """What a fit may use: the rounds without the stranded ones, ramp-corrected, and the
    model; ValueError when nothing is left or the rounds contradict their ramp record.
    `ramps`: `ramps_by_run(rounds)`, when the caller has it."""
    if ramps is None:
        ramps = ramps_by_run(rounds)  # each run's model fitted once
    stranded = set(stranded_rounds(rounds, ramps))
    kept = [r for i, r in enumerate(rounds) if i not in stranded]
    if stranded and not kept:
        raise ValueError(
            f"All {len(stranded)} rounds were measured on a clock ramp by a run that was "
            "interrupted before its anchor round, so their slow-down cannot be taken out; "
            "rerun the profiler with --resume to measure them again."
        )
    corrected, model = correct_rounds(kept, ramps)
    for index, round_ in enumerate(corrected):
        if "clock_factor" not in round_:
            continue
        seconds = float(round_["median_step_time"])
        if not MIN_STEP_SECONDS <= seconds <= MAX_STEP_SECONDS:
            raise ValueError(
                f"round {index}'s step time corrected for the clock ramp is {seconds:g} s, "
                "outside a decode step's range; the ramp record does not fit the rounds."
            )
    return corrected, model
