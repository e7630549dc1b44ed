"""Turning one round's decode-step records into a measurement, or a clear refusal (pure).

* Alignment as SGLang's profiler: steps present on every DP rank with every rank at the
  target batch; the first `ROUND_WARMUP_STEPS` aligned steps are dropped.
* Pin checks (contract §9): the record's `budget` and `verify_tokens_local` must match the
  pin in the server's arithmetic, and the replayed tier (`num_verify_tokens`) must be the
  tier for M — a full-width tier where a smaller one was expected is the verify-all
  shortcut swallowing the pin.
* Stopping rule (`steady`): the confidence interval of the step time at the reference
  context, widened for autocorrelation, over a window that does not drift; a leading
  stretch that drifts (clock warm-up) is dropped first.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sps_operator.api.limits import MAX_STEP_SECONDS, MIN_STEP_SECONDS
from sps_operator.profiler.steady import (
    RISE_Z,
    TAIL_Z,
    Ar1Prior,
    SteadyStats,
    level_rise,
    steady_stats,
    tail_rise,
)
from sps_operator.profiler.sweep import (
    DEFAULT_CI_LEVEL_Z,
    MATCH_FRACTION_ERROR,
    MATCH_FRACTION_WARN,
    ROUND_WARMUP_STEPS,
)
from sps_operator.profiler.untrusted import json_int, json_number


class RoundError(RuntimeError):
    """The round's records cannot give a trustworthy measurement."""


class PinNotTakenError(RoundError):
    """The pinned budget did not change what the server ran (e.g. the verify-all shortcut)."""


@dataclass(frozen=True)
class StepRow:
    """The fields of one decode-step record the profiler reads."""

    forward_ct: int
    num_running_reqs: int
    num_verify_tokens: int
    step_time: float  # seconds
    budget: int | None = None
    verify_tokens_local: int | None = None

    def to_record(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "forward_ct": self.forward_ct,
            "num_running_reqs": self.num_running_reqs,
            "num_verify_tokens": self.num_verify_tokens,
            "step_time": self.step_time,
        }
        if self.budget is not None:
            data["budget"] = self.budget
        if self.verify_tokens_local is not None:
            data["verify_tokens_local"] = self.verify_tokens_local
        return data


# SGLang nulls a step time longer than this (an idle gap, not a step): contract §11.7.
STEP_CPU_MS_MAX = MAX_STEP_SECONDS * 1000.0


def rows_from_payload(payload: Any, rank: int) -> list[StepRow]:
    """Decode-step rows of one rank's `dspark_info_record` (records without timing skipped).

    The payload is untrusted: anything SGLang would not send raises RoundError saying what.
    """
    if not isinstance(payload, Mapping):
        raise RoundError(f"DP rank {rank} stopped reporting dspark_info_record mid-profile.")
    records = payload.get("records", [])
    if not isinstance(records, list):
        raise RoundError(f"DP rank {rank} dspark_info_record.records is not a list.")
    rows: list[StepRow] = []
    for record in records:
        if not isinstance(record, Mapping):
            raise RoundError(f"DP rank {rank} has a record that is not an object: {record!r:.120}")
        step_cpu_ms = record.get("step_cpu_ms")
        if step_cpu_ms is None:
            continue
        rows.append(_row(record, step_cpu_ms, rank))
    return rows


def _row(record: Mapping[str, Any], step_cpu_ms: Any, rank: int) -> StepRow:
    milliseconds = json_number(step_cpu_ms)
    if milliseconds is None or not 0 < milliseconds <= STEP_CPU_MS_MAX:
        raise RoundError(
            f"DP rank {rank}: the record at forward_ct={record.get('forward_ct')!r:.20} has "
            f"step_cpu_ms={step_cpu_ms!r:.40}, but SGLang records a step's time in "
            f"(0, {STEP_CPU_MS_MAX:g}] ms; the server's step timer is broken (or this is not an "
            "SGLang DSpark server), so no step time from it can be trusted."
        )
    fields = {
        "forward_ct": json_int(record.get("forward_ct")),
        "num_running_reqs": json_int(record.get("num_running_reqs", record.get("bs"))),
        "num_verify_tokens": json_int(record.get("num_verify_tokens", -1)),
    }
    budget, local = record.get("budget"), record.get("verify_tokens_local")
    bad = [name for name, value in fields.items() if value is None]
    if budget is not None and json_int(budget) is None:
        bad.append("budget")
    if local is not None and json_int(local) is None:
        bad.append("verify_tokens_local")
    if bad:
        raise RoundError(
            f"DP rank {rank} has a malformed record (field(s) {bad} missing or not integers): "
            f"{dict(record)!r:.200}"
        )
    local_int = json_int(local)
    return StepRow(
        forward_ct=fields["forward_ct"] or 0,
        num_running_reqs=fields["num_running_reqs"] or 0,
        num_verify_tokens=fields["num_verify_tokens"] or 0,
        step_time=milliseconds / 1000.0,
        budget=json_int(budget),
        verify_tokens_local=local_int if local_int is not None and local_int >= 0 else None,
    )


# --- stopping rule -------------------------------------------------------------------------


@dataclass(frozen=True)
class StoppingRule:
    """When a round has measured enough, and at which context its step time is reported."""

    ci_rel_width: float
    min_steps: int
    prompt_len: int
    reference_context: float
    z: float = DEFAULT_CI_LEVEL_Z
    # The step correlation of the run's earlier rounds, pooled (`steady.Ar1Prior`).
    ar1_prior: Ar1Prior | None = None

    def judge(self, times: Sequence[float], contexts: Sequence[float]) -> SteadyStats | None:
        return steady_stats(
            times,
            contexts,
            reference_context=self.reference_context,
            ci_rel_width=self.ci_rel_width,
            min_steps=min(self.min_steps, len(times)),
            z=self.z,
            ar1_prior=self.ar1_prior,
        )

    def tail_rise(self, times: Sequence[float], excess_z: float = TAIL_Z) -> float | None:
        """How much slower the round's last steps read than the ones before (`tail_rise`)."""
        return tail_rise(
            times,
            ci_rel_width=self.ci_rel_width,
            z=self.z,
            ar1_prior=self.ar1_prior,
            excess_z=excess_z,
        )

    def rise(self, times: Sequence[float]) -> float | None:
        """A significant rise of the round's step times over all of them (`level_rise`)."""
        return level_rise(
            times,
            ci_rel_width=self.ci_rel_width,
            z=self.z,
            ar1_prior=self.ar1_prior,
        )


# What a round is for: measuring a cell, settling the clocks (the warm-up), or only checking
# that the pin takes (the pre-flight probe, whose step time is never used).
RoundGoal = Literal["measure", "settle", "probe"]


# --- alignment -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Aligned:
    """Steps seen on every rank at the target batch, in forward_ct order."""

    common_cts: list[int]
    aligned_cts: list[int]
    by_ct: list[dict[int, StepRow]]

    def rows_at(self, ct: int) -> list[StepRow]:
        return [rank[ct] for rank in self.by_ct]


def align(rank_rows: Sequence[Sequence[StepRow]], bs: int) -> Aligned:
    by_ct = [{row.forward_ct: row for row in rows} for rows in rank_rows]
    if not by_ct or any(not rank for rank in by_ct):
        return Aligned([], [], by_ct)
    common = set(by_ct[0])
    for rank in by_ct[1:]:
        common &= set(rank)
    common_cts = sorted(common)
    aligned = [ct for ct in common_cts if all(rank[ct].num_running_reqs == bs for rank in by_ct)]
    return Aligned(common_cts, aligned, by_ct)


def steady_series(aligned: Aligned, prompt_len: int) -> tuple[list[int], list[float], list[float]]:
    """Steady cts (after warm-up), their step time (the mean over ranks per step) and the KV
    context per request during each step.

    At SGLANG_SIMULATE_ACC_LEN=1.0 every step adds one token to every request, and the
    round's first record (the first decode step, `prompt_len + 1` tokens in context) carries
    no step time, so a step `d` forwards after the first timed one holds `prompt_len + 2 + d`.
    """
    cts = aligned.aligned_cts[ROUND_WARMUP_STEPS:]
    first = min(aligned.by_ct[0]) if aligned.by_ct and aligned.by_ct[0] else 0
    times = [statistics.fmean(r.step_time for r in aligned.rows_at(ct)) for ct in cts]
    contexts = [float(prompt_len + 2 + ct - first) for ct in cts]
    return cts, times, contexts


def step_clocks_at(aligned: Aligned, cts: Sequence[int], clock_start: float) -> list[float]:
    """The run clock (seconds of decode steps since the run's first) at the start of each
    step in `cts`: `clock_start` plus the first rank's step times of this round before it."""
    rows = sorted(aligned.by_ct[0].values(), key=lambda r: r.forward_ct) if aligned.by_ct else []
    before: dict[int, float] = {}
    now = clock_start
    for row in rows:
        before[row.forward_ct] = now
        now += row.step_time
    return [before.get(ct, now) for ct in cts]


@dataclass(frozen=True)
class SteadySeries:
    """A round's steady steps: their times, KV context per request and run clocks."""

    times: list[float]
    contexts: list[float]
    clocks: list[float]

    def __len__(self) -> int:
        return len(self.times)

    def from_index(self, start: int) -> SteadySeries | None:
        """Its steps from `start` on; None when none is left."""
        if start >= len(self.times):
            return None
        start = max(0, start)
        return SteadySeries(self.times[start:], self.contexts[start:], self.clocks[start:])

    def from_clock(self, clock: float) -> SteadySeries | None:
        """Its steps that began at run clock `clock` or later; None when none did."""
        later = [i for i, c in enumerate(self.clocks) if c >= clock]
        return self.from_index(later[0]) if later else None


def steady_part(
    rank_rows: Sequence[Sequence[StepRow]],
    *,
    bs: int,
    prompt_len: int,
    pinned: bool,
    clock_start: float,
) -> SteadySeries:
    """A round's steady steps (pinned steps only when pinned) with their run clocks."""
    aligned = align(rank_rows, bs)
    cts, times, contexts = steady_series(aligned, prompt_len)
    if pinned:
        keep = _pinned_steps(aligned, cts)
        cts = [cts[i] for i in keep]
        times = [times[i] for i in keep]
        contexts = [contexts[i] for i in keep]
    return SteadySeries(times, contexts, step_clocks_at(aligned, cts, clock_start))


# --- pin checks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PinExpectation:
    """What a correct server runs for bs requests per rank pinned at frac (contract §9.1)."""

    frac: float
    bs: int
    gamma: int
    mode: str
    tiers: tuple[int, ...]

    @property
    def k(self) -> int:
        return self.gamma + 1

    @property
    def budget(self) -> int:
        return max(0, int(float(self.frac) * (self.bs * self.gamma)))

    @property
    def m(self) -> int:
        return min(self.bs + self.budget, self.bs * self.k)

    def tier(self, tokens: int) -> int | None:
        for t in self.tiers:
            if t >= tokens:
                return t
        return None

    @property
    def expected_tier(self) -> int | None:
        return self.tier(self.m) if self.mode == "compact" else self.m

    @property
    def full_tier(self) -> int | None:
        return self.tier(self.bs * self.k) if self.mode == "compact" else self.bs * self.k

    @property
    def shrinks(self) -> bool:
        """True when a working pin must replay a smaller graph than full width."""
        e, f = self.expected_tier, self.full_tier
        return e is not None and f is not None and e < f


VERIFY_ALL_ADVICE = (
    "The verify-all shortcut is swallowing the pin: compact mode with no SPS table (or a flat "
    "1-probe one) runs every step at full width whatever dspark_force_budget_frac says, so "
    "every fraction would be recorded under a false M. Fix: relaunch the profiling server with "
    "any non-flat table, e.g. --speculative-dspark-sps-table-path pointing at "
    '{"sample_batch_tokens":[1,2],"sample_steps_per_sec":[1.0,1.0],"max_batch_tokens":2} '
    "(or the diagonal table from a static sweep), or use an SGLang build with the fix "
    "(PR #32930 / #38897). With --enable-dp-attention and no DP tier gather the graph is "
    "always full width too: profile off-diagonal without dp-attention."
)


def check_pin(rows: Sequence[StepRow], expect: PinExpectation, where: str) -> list[str]:
    """Raise PinNotTakenError when the records show the pin did not take; return warnings."""
    warnings: list[str] = []
    budgets = {r.budget for r in rows}
    if budgets == {None}:
        raise PinNotTakenError(
            f"{where}: no steady step carries a `budget`, so the pin frac={expect.frac} never "
            "reached the budget planner (stale or overwritten pin, or a server without the "
            "forced-budget hook). Check /set_internal_state on this build."
        )
    wrong_budget = sorted({b for b in budgets if b is not None and b != expect.budget})
    if wrong_budget:
        raise PinNotTakenError(
            f"{where}: records show budget {wrong_budget}, expected {expect.budget} "
            f"(= int({expect.frac} * ({expect.bs}*{expect.gamma}))); the pin did not reach the "
            "planner as set (another client changed dspark_force_budget_frac?)."
        )
    locals_ = {r.verify_tokens_local for r in rows if r.verify_tokens_local is not None}
    wrong_local = sorted(v for v in locals_ if v != expect.m)
    if wrong_local:
        raise PinNotTakenError(
            f"{where}: records show verify_tokens_local {wrong_local}, expected M={expect.m}; "
            "the pin did not take."
        )
    observed = sorted({r.num_verify_tokens for r in rows})
    if len(observed) != 1:
        raise RoundError(
            f"{where}: steady steps replayed differing num_verify_tokens {observed}; the pin did "
            "not hold a single graph tier, so the measurement is ambiguous."
        )
    tier = observed[0]
    if tier < expect.m:
        raise PinNotTakenError(
            f"{where}: replayed {tier} verify tokens, fewer than the pinned M={expect.m}."
        )
    full = expect.full_tier
    if expect.mode == "compact" and expect.shrinks and full is not None and tier >= full:
        raise PinNotTakenError(
            f"{where}: pinned M={expect.m} should replay the {expect.expected_tier}-token "
            f"graph but every step replayed {tier} = full width ({expect.bs}x{expect.k}). "
            + VERIFY_ALL_ADVICE
        )
    if expect.expected_tier is not None and tier != expect.expected_tier:
        warnings.append(
            f"{where}: replayed {tier} verify tokens, expected tier {expect.expected_tier} for "
            f"M={expect.m} (the server's capture list may differ from /server_info's)."
        )
    return warnings


# --- the whole round -------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundOutcome:
    """One measured cell; `to_summary` is its rounds.jsonl line."""

    repeat: int
    bs: int
    dp_size: int
    frac: float | None
    batch_tokens: int
    stats: SteadyStats
    match_fraction: float
    per_rank_median_step_time: list[float]
    graph_tier: int
    expected_tier: int | None
    budget: int | None
    load_info: dict[str, Any]
    context_len: float
    warnings: list[str] = field(default_factory=list)
    graph_tiers: list[int] | None = None
    # The run clock at each steady step (None when the driver keeps no clock).
    clocks: list[float] | None = None
    # How far its step times rose beyond KV growth over the whole round (`level_rise`):
    # it straddled a clock cap and is measured again. None: they did not.
    level_rise: float | None = None
    # How much slower its last steps read than the ones before (`steady.tail_rise`, at a
    # rise's threshold: acted on by measuring the cell again): for a round that stopped on
    # its effective steps, a cap that set in after it stopped.
    tail_rise: float | None = None
    # Steady steps of the warm-up round before this one counted in its measurement (the
    # clocks showed no fall from their start: `steady.still_falling` said no).
    carried_steps: int = 0

    def to_summary(self) -> dict[str, Any]:
        summary: dict[str, Any] = {
            # The reference profiler's fields, same names and meaning.
            "repeat": self.repeat,
            "batch_size": self.bs * self.dp_size,
            "batch_size_per_rank": self.bs,
            "frac": self.frac,
            "batch_tokens": self.batch_tokens,
            "steps_per_sec": 1.0 / self.stats.median,
            "num_steady_steps": self.stats.num_steps,
            "match_fraction": self.match_fraction,
            "per_rank_median_step_time": self.per_rank_median_step_time,
            "load_info": self.load_info,
            # Ours.
            "median_step_time": self.stats.median,
            "step_time_se": self.stats.se,
            "ci_low": self.stats.ci_low,
            "ci_high": self.stats.ci_high,
            "ci_rel_width": self.stats.rel_width,
            "ci_met": self.stats.done,
            "drift": self.stats.drift,
            "dropped_drift_steps": self.stats.window_start,
            "effective_steps": self.stats.window.ess,
            "ar1": self.stats.window.ar1,
            "ar1_se": self.stats.window.ar1_se,
            "kv_slope_s_per_token": self.stats.window.kv_slope,
            "context_len": self.context_len,
            "graph_tier": self.graph_tier,
            "expected_tier": self.expected_tier,
            "budget": self.budget,
        }
        if self.graph_tiers is not None:
            summary["graph_tiers"] = self.graph_tiers
        if self.clocks:
            # The run clock over the measured window: what a clock-ramp model corrects.
            summary["clock_s"] = [self.clocks[self.stats.window_start], self.clocks[-1]]
        if self.carried_steps:
            summary["carried_warmup_steps"] = self.carried_steps
        if self.warnings:
            summary["warnings"] = self.warnings
        return summary


def _aligned_round(
    rank_rows: Sequence[Sequence[StepRow]], where: str, bs: int, dp_size: int, rule: StoppingRule
) -> tuple[Aligned, float, list[str]]:
    """The round's records aligned across DP ranks, with the share of steady-window steps
    that ran at the target batch and the warnings so far (RoundError when unusable)."""
    if len(rank_rows) != dp_size:
        raise RoundError(
            f"{where}: expected records from {dp_size} DP ranks, got {len(rank_rows)}."
        )
    for rank, rows in enumerate(rank_rows):
        if not rows:
            raise RoundError(
                f"{where}: DP rank {rank} produced no new decode-step records; the load did not "
                "reach it (DP imbalance, a dead scheduler, or the round was too short)."
            )
    aligned = align(rank_rows, bs)
    if not aligned.common_cts:
        raise RoundError(
            f"{where}: DP ranks share no common forward_ct, so steps cannot be aligned across "
            "ranks (profiling needs dp-attention lockstep or dp=1)."
        )
    need = ROUND_WARMUP_STEPS + rule.min_steps
    if len(aligned.aligned_cts) < need:
        seen = sorted(
            {rank[ct].num_running_reqs for rank in aligned.by_ct for ct in aligned.common_cts}
        )
        raise RoundError(
            f"{where} never stabilized: only {len(aligned.aligned_cts)} of "
            f"{len(aligned.common_cts)} common decode steps had every rank at {bs} requests "
            f"(need {need}; ranks ran batches {seen[:12]}). A DP rank that never reaches the "
            "target batch, retraction, or a too-short --round-timeout."
        )
    first, last = aligned.aligned_cts[0], aligned.aligned_cts[-1]
    window = [ct for ct in aligned.common_cts if first <= ct <= last]
    match_fraction = len(aligned.aligned_cts) / len(window)
    warnings: list[str] = []
    if match_fraction < MATCH_FRACTION_ERROR:
        raise RoundError(
            f"{where} is unstable mid-round: only {match_fraction:.0%} of the {len(window)} "
            "decode steps inside the steady window ran at the target per-rank batch."
        )
    if match_fraction < MATCH_FRACTION_WARN:
        warnings.append(
            f"{where}: {match_fraction:.0%} of steady-window steps ran at the target batch; "
            "treat this probe with suspicion."
        )
    return aligned, match_fraction, warnings


def postprocess_round(
    rank_rows: Sequence[Sequence[StepRow]],
    *,
    repeat: int,
    bs: int,
    dp_size: int,
    gamma: int,
    mode: str,
    tiers: Sequence[int],
    frac: float | None,
    rule: StoppingRule,
    load_info: dict[str, Any],
    clock_start: float | None = None,
    carried: SteadySeries | None = None,
) -> RoundOutcome:
    """Validate a finished round's records and measure it (raises RoundError/PinNotTakenError).

    `clock_start`: the run clock at the round's first record, to place its steps in time;
    `carried`: the earlier warm-up round's steady steps, measured before this round's (same
    cell, same prompts: the stopping rule's window may start in them)."""
    k = gamma + 1
    where = f"Round bs={bs} (per rank, dp={dp_size})" + (
        f" frac={frac}" if frac is not None else ""
    )
    aligned, match_fraction, warnings = _aligned_round(rank_rows, where, bs, dp_size, rule)
    cts, times, contexts = steady_series(aligned, rule.prompt_len)
    rows = [row for ct in cts for row in aligned.rows_at(ct)]
    budget: int | None = None
    expected_tier: int | None
    if frac is None:
        low = sorted({r.num_verify_tokens for r in rows if r.num_verify_tokens < bs * k})
        if low:
            raise RoundError(
                f"{where}: steps report num_verify_tokens {low} < {bs}x{k}; the ranks are not "
                "running the uniform static verify a diagonal table assumes."
            )
        batch_tokens = bs * k
        expected_tier = batch_tokens
    else:
        expect = PinExpectation(frac=frac, bs=bs, gamma=gamma, mode=mode, tiers=tuple(tiers))
        # Steps before the confidence relay resolves carry no budget and run full width.
        keep = _pinned_steps(aligned, cts)
        if keep:
            cts = [cts[i] for i in keep]
            times = [times[i] for i in keep]
            contexts = [contexts[i] for i in keep]
        pinned = [row for ct in cts for row in aligned.rows_at(ct)]
        warnings += check_pin(pinned, expect, where)
        batch_tokens = expect.m
        budget = expect.budget
        expected_tier = expect.expected_tier
    clocks = step_clocks_at(aligned, cts, clock_start) if clock_start is not None else None
    prefix = carried or SteadySeries([], [], [])
    stats = rule.judge([*prefix.times, *times], [*prefix.contexts, *contexts])
    if stats is None:
        raise RoundError(f"{where}: no steady steps left after filtering.")
    if stats.median < MIN_STEP_SECONDS:
        raise RoundError(
            f"{where}: the median decode step took {stats.median * 1e3:.4g} ms, below the "
            f"{MIN_STEP_SECONDS * 1e3:g} ms that no decode step of a real model on a real GPU "
            "undercuts (kernel launches and a forward pass: docs/profiler.md). The server's "
            "step_cpu_ms is not in milliseconds (seconds?) or its step timer is broken; no "
            "table can be made from it."
        )
    if not stats.done:
        reason = (
            f"step times still drift by {stats.drift:.1%} in a way KV growth does not explain"
            if stats.window.drifting
            else f"the CI is {stats.rel_width:.1%} wide (target {rule.ci_rel_width:.1%})"
        )
        warnings.append(
            f"{where}: {reason} after {stats.num_steps} steps "
            f"({stats.window.ess:.0f} effective); kept, flagged ci_met=false (raise "
            "--max-steady-steps and --max-effective-steps for tighter rounds)."
        )
    window_cts = cts[max(0, stats.window_start - len(prefix)) :]
    per_rank = [
        statistics.median(rank[ct].step_time for ct in window_cts) for rank in aligned.by_ct
    ]
    return RoundOutcome(
        repeat=repeat,
        bs=bs,
        dp_size=dp_size,
        frac=frac,
        batch_tokens=batch_tokens,
        stats=stats,
        match_fraction=match_fraction,
        per_rank_median_step_time=per_rank,
        graph_tier=aligned.rows_at(cts[-1])[0].num_verify_tokens,
        expected_tier=expected_tier,
        budget=budget,
        load_info=load_info,
        context_len=rule.reference_context,
        warnings=warnings,
        graph_tiers=list(tiers) if mode in ("compact", "static") and tiers else None,
        clocks=[*prefix.clocks, *clocks] if clocks is not None else None,
        level_rise=rule.rise([*prefix.times, *times]),
        tail_rise=rule.tail_rise(times, RISE_Z),
        carried_steps=len(prefix),
    )


def _pinned_steps(aligned: Aligned, cts: Sequence[int]) -> list[int]:
    """Indices of the steps every rank ran with the pin (the confidence relay resolved)."""
    return [i for i, ct in enumerate(cts) if all(r.budget is not None for r in aligned.rows_at(ct))]


def live_progress(
    rank_rows: Sequence[Sequence[StepRow]],
    *,
    bs: int,
    rule: StoppingRule,
    pinned: bool,
    carried: SteadySeries | None = None,
) -> tuple[int, SteadyStats | None, list[float]]:
    """During a round: aligned steps so far, the stopping statistics (None before there are
    `rule.min_steps` steady steps, `carried` ones included: `postprocess_round`) and this
    round's steady step times."""
    aligned = align(rank_rows, bs)
    cts, times, contexts = steady_series(aligned, rule.prompt_len)
    if pinned:
        keep = _pinned_steps(aligned, cts)
        times = [times[i] for i in keep]
        contexts = [contexts[i] for i in keep]
    prefix = carried or SteadySeries([], [], [])
    if len(prefix) + len(times) < rule.min_steps:
        return len(aligned.aligned_cts), None, times
    judged = rule.judge([*prefix.times, *times], [*prefix.contexts, *contexts])
    return len(aligned.aligned_cts), judged, times
