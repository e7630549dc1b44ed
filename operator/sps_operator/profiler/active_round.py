"""One round on the server, from its first request to its last record (`ActiveRound`).

Started on construction, polled until its stopping rule (`rounds`) holds, ended, read back
and validated; `RingWatch` notices a record ring too small for a round. The sweep driver
(`runner`) keeps the next round going while this one is measured.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sps_operator.profiler.client import LoadThread, ServerUnavailableError
from sps_operator.profiler.round_plans import RoundPlan
from sps_operator.profiler.rounds import (
    PinExpectation,
    RoundError,
    RoundOutcome,
    SteadySeries,
    StepRow,
    align,
    check_pin,
    live_progress,
    postprocess_round,
    steady_part,
)
from sps_operator.profiler.session import Session
from sps_operator.profiler.steady import (
    AR1_MARGIN_SE,
    LIVE_RISE_BLOCK_STEPS,
    MIN_SETTLE_SECONDS,
    RISE_BLOCKS,
    SteadyStats,
    ar1_from_differences,
    level_from,
    still_falling,
)
from sps_operator.profiler.stopping import (
    drift_after_an_early_stop,
    round_finished,
    stopped_on_effective_steps,
)
from sps_operator.profiler.sweep import ROUND_WARMUP_STEPS, RoundSettings, SweepCell
from sps_operator.tables.clockramp import Chunk, chunk_series, ramp_evident, ramp_over_from

logger = logging.getLogger(__name__)

LOAD_JOIN_TIMEOUT_SECONDS = 60.0
# The warm-up rounds run until the clocks have settled, but never longer than this (steady
# steps over all of them).
MAX_WARMUP_STEPS = 3000
# Aborting, joining the load and reading the last records after a round's deadline.
END_OF_ROUND_SECONDS = 30.0


@dataclass
class MeasuredRound:
    outcome: RoundOutcome
    rank_rows: list[list[StepRow]]
    # Fields added to the round's rounds.jsonl line (the anchor's `clock_ramp`).
    extra: dict[str, Any] = field(default_factory=dict)


def _pin_early_check(
    session: Session, rank_rows: list[list[StepRow]], cell: SweepCell, where: str
) -> None:
    """Fail fast on a pin that did not take, before spending the whole round on it."""
    if cell.frac is None:
        return
    aligned = align(rank_rows, cell.bs)
    cts = aligned.aligned_cts[ROUND_WARMUP_STEPS:]
    rows = [r for ct in cts for r in aligned.rows_at(ct) if r.budget is not None]
    if len(rows) < ROUND_WARMUP_STEPS:
        return
    ctx = session.context
    expect = PinExpectation(cell.frac, cell.bs, ctx.gamma, ctx.mode, tuple(ctx.tiers))
    check_pin(rows, expect, where)


class RingWatch:
    """Notices a record ring too small for one round: a rank's records of this round stop
    growing while its forward_ct moves on, or its oldest record of this round is gone (the
    oldest were evicted: nothing else removes a record of this round). The second catches a
    ring that filled between two polls, which a slow poller (a loaded host) often sees."""

    def __init__(self, where: str, round_steps: int) -> None:
        self.where = where
        self.round_steps = round_steps
        self._seen: list[tuple[int, int, int]] | None = None

    def check(self, rank_rows: Sequence[Sequence[StepRow]]) -> None:
        seen = [
            (
                len(rows),
                max((r.forward_ct for r in rows), default=-1),
                min((r.forward_ct for r in rows), default=-1),
            )
            for rows in rank_rows
        ]
        if self._seen is not None:
            for rank, ((count, top, low), (before, top_before, low_before)) in enumerate(
                zip(seen, self._seen, strict=False)
            ):
                stalled = count <= before and top > top_before
                evicted = low_before >= 0 and low > low_before
                if count and (stalled or evicted):
                    raise RoundError(
                        f"{self.where}: ring too small: DP rank {rank}'s record ring holds only "
                        f"{count} decode records, and a round needs up to {self.round_steps}; "
                        "the oldest steps of this round were evicted. Raise the server's record "
                        "ring (SGLang's INFO_DUMP_MAX_RECORDS; sps-sim --record-ring-size) or "
                        "lower --max-steady-steps."
                    )
        self._seen = seen


class ActiveRound:
    """A round from its first request to its last record.

    Started (pin, ring cleared, load sent) on construction; `wait` polls until the stopping
    rule holds, aborts and reads the records back; `measure` validates them. The driver
    starts the next round between `wait` and `measure`, so the GPU never idles between
    rounds while this process does its bookkeeping: idle clocks drop, and a round on
    cold clocks measures them ramping back up.
    """

    def __init__(
        self,
        session: Session,
        cell: SweepCell,
        settings: RoundSettings,
        plan: RoundPlan,
        history: Sequence[float] = (),
        *,
        clock_start: float = 0.0,
        probe: Sequence[Chunk] = (),
        previous: SteadySeries | None = None,
        end_on_rise: bool = False,
    ) -> None:
        self.session, self.cell, self.settings, self.plan = session, cell, settings, plan
        # Warm-up only: the steady step times of the warm-up rounds before this one, and
        # their chunks on the run clock (the ramp model's probe).
        self.history = list(history)
        self.probe = list(probe)
        # Warm-up only: the warm-up round before this one (`steady_part`), and the same once
        # it counts in this round's measurement (`_carry_previous`).
        self.previous = previous
        self.carried: SteadySeries | None = None
        # The run clock (seconds of decode steps since the run's first) at this round's start.
        self.clock_start = clock_start
        self.clock_end = clock_start
        ctx = session.context
        self.where = f"Round bs={cell.bs} (per rank, dp={ctx.dp_size})" + (
            f" frac={cell.frac}" if cell.frac is not None else ""
        )
        self.started = time.monotonic()
        self.deadline = self.started + settings.round_timeout_seconds
        client = session.client
        with client.deadline(self.deadline, self.where):
            if cell.frac is not None:
                session.pin(cell.frac)
            cleared = session.clear_records()
            client.flush_cache()
            if cleared:
                # An empty ring: every record from now on belongs to this round.
                self.watermarks = [-1] * ctx.dp_size
            else:
                self.watermarks = [
                    max((r.forward_ct for r in rows), default=-1)
                    for rows in session.fetch_rows_retrying()
                ]
            payload = session.load_payload(cell.bs * ctx.dp_size, plan)
            self.load: LoadThread = client.start_load(payload, self.deadline)
        self.ring = RingWatch(self.where, plan.max_new_tokens)
        self.reached = False
        # Warm-up only: the clocks settled (`settled`) or the warm-up ran out of steps
        # (`capped`) during this round, which then went on as its cell's round.
        self.settled = False
        self.capped = False
        # Warm-up only: the clocks are still ramping, but evidently and as the ramp model
        # describes: the sweep may start, corrected for it (`tables.clockramp`).
        self.probed = False
        self.steady_steps = 0
        self.steady_times: list[float] = []
        # A measuring round whose steps rose mid-round (`steady.level_rise`), seen live: it
        # is ended there and measured again, not run on to its CI over a clock cap.
        self.rose: float | None = None
        self.end_on_rise = end_on_rise
        # A measuring round that stopped on its effective steps (`stopped_on_effective_steps`):
        # its records read at the end are checked for a cap that set in after the stop.
        self.stopped_early = False

    @property
    def warmup_done(self) -> bool:
        return self.settled or self.capped

    def steady_part(self, rank_rows: Sequence[Sequence[StepRow]]) -> SteadySeries:
        """This round's steady steps on the run clock."""
        return steady_part(
            rank_rows,
            bs=self.cell.bs,
            prompt_len=self.plan.rule.prompt_len,
            pinned=self.cell.frac is not None,
            clock_start=self.clock_start,
        )

    def chunks(self, rank_rows: Sequence[Sequence[StepRow]]) -> list[Chunk]:
        """This round's steady steps as the ramp model's chunks on the run clock."""
        part = self.steady_part(rank_rows)
        return chunk_series(part.times, part.clocks)

    def _carry_previous(self, times: Sequence[float]) -> SteadySeries | None:
        """Warm-up, on settling: the previous warm-up round's steps from where the settled
        series reads level (`steady.level_from`). They were measured at the same cell with
        the same prompts on clocks that had settled, so they count in the cell's measurement
        (a settled round is otherwise judged from its own first step, and on a noisy GPU a
        warm-up round that ran out unsettled is a whole measuring round thrown away)."""
        previous = self.previous
        if previous is None or not previous.times:
            return None
        rule = self.plan.rule
        start = level_from([*self.history, *times], z=rule.z, tolerance_rel=rule.ci_rel_width / 2)
        if start is None:
            return None
        # The previous round is the history's last; its series may hold a few more steps
        # than the history got (read at its end, not at its last poll): counted from the
        # history's end, a later start, never an earlier one.
        return previous.from_index(start - (len(self.history) - len(previous)))

    def _ramp_probed(self, rank_rows: Sequence[Sequence[StepRow]], times: Sequence[float]) -> bool:
        """Warm-up: has it covered `MIN_SETTLE_SECONDS`, do its steps still fall (the ramp is
        live), and does the model describe them (`ramp_evident`)?"""
        series = [*self.history, *times]
        if sum(series) < MIN_SETTLE_SECONDS or not still_falling(series, z=self.plan.rule.z):
            return False
        tolerance = self.plan.rule.ci_rel_width / 2
        return ramp_evident([*self.probe, *self.chunks(rank_rows)], tolerance, _step_ar1(series))

    def _ramp_over(self, rank_rows: Sequence[Sequence[StepRow]], times: Sequence[float]) -> bool:
        """Warm-up: has it covered `MIN_SETTLE_SECONDS`, and does every ramp the model allows
        leave at most the tolerance from before this round's start (`ramp_over_from`)? Then
        the clocks have settled, this round counts from its first step and the previous
        warm-up round from where the ramp was within the tolerance (`carried`)."""
        series = [*self.history, *times]
        if sum(series) < MIN_SETTLE_SECONDS:
            return False
        tolerance = self.plan.rule.ci_rel_width / 2
        chunks = [*self.probe, *self.chunks(rank_rows)]
        over_from = ramp_over_from(chunks, tolerance, _step_ar1(series))
        if over_from is None or over_from > self.clock_start:
            return False
        if self.previous is not None:
            self.carried = self.previous.from_clock(over_from)
        return True

    def _stopped_early(self, stats: SteadyStats | None, times: Sequence[float]) -> bool:
        plan = self.plan
        return stats is not None and stopped_on_effective_steps(
            plan.rule, stats, times, plan.step_budget, plan.effective_budget
        )

    def _new_rows(self, polled: Sequence[Sequence[StepRow]]) -> list[list[StepRow]]:
        rank_rows = [
            [r for r in rows if r.forward_ct > mark]
            for rows, mark in zip(polled, self.watermarks, strict=False)
        ]
        if len(rank_rows) != len(self.watermarks):
            raise RoundError(f"{self.where}: the number of DP ranks changed mid-profile.")
        self.ring.check(rank_rows)
        return rank_rows

    def wait(self) -> list[list[StepRow]]:
        """Poll until the round may stop, abort it, and return its records."""
        session, settings, plan = self.session, self.settings, self.plan
        client = session.client
        steady_started: float | None = None
        rise_seen: float | None = None  # the rise the last poll showed
        goal = plan.goal
        with client.deadline(self.deadline, self.where):
            while time.monotonic() < self.deadline:
                time.sleep(
                    min(settings.poll_interval_seconds, max(0.0, self.deadline - time.monotonic()))
                )
                try:
                    polled = session.fetch_rows_retrying()
                except ServerUnavailableError:
                    if time.monotonic() >= self.deadline:
                        break  # the round's time is up: end it with what was measured
                    raise
                rank_rows = self._new_rows(polled)
                _pin_early_check(session, rank_rows, self.cell, self.where)
                aligned_count, stats, times = live_progress(
                    rank_rows,
                    bs=self.cell.bs,
                    rule=plan.rule,
                    pinned=self.cell.frac is not None,
                    carried=self.carried,
                )
                self.steady_steps = len(times)
                self.steady_times = times
                if goal == "settle" and round_finished(
                    "settle", plan.rule, stats, times, MAX_WARMUP_STEPS, self.history
                ):
                    self.capped = len(self.history) + len(times) >= MAX_WARMUP_STEPS
                    self.settled = not self.capped
                    # On as the cell's round, judged from its first step (and the previous
                    # warm-up round's from where the clocks read level).
                    goal = "measure"
                    self.carried = self._carry_previous(times) if self.settled else None
                elif goal == "settle" and self._ramp_probed(rank_rows, times):
                    self.probed = True
                    break  # the sweep starts; this cell is measured again at the end
                elif goal == "settle" and self._ramp_over(rank_rows, times):
                    self.settled = True
                    goal = "measure"  # on as the cell's round, as above
                if aligned_count >= ROUND_WARMUP_STEPS and steady_started is None:
                    steady_started = time.monotonic()
                steady_seconds = time.monotonic() - steady_started if steady_started else 0.0
                # The reference's seconds floor is for measurements: a probe's is thrown away.
                seconds_ok = (
                    settings.min_steady_seconds is None
                    or goal == "probe"
                    or steady_seconds >= settings.min_steady_seconds
                )
                if (
                    goal != "settle"
                    and seconds_ok
                    and round_finished(
                        goal,
                        plan.rule,
                        stats,
                        times,
                        plan.step_budget,
                        effective_budget=plan.effective_budget,
                    )
                ):
                    self.reached = stats is not None and stats.done
                    self.stopped_early = goal == "measure" and self._stopped_early(stats, times)
                    break
                if (
                    self.end_on_rise
                    and goal == "measure"
                    and len(times) >= RISE_BLOCKS * LIVE_RISE_BLOCK_STEPS
                ):
                    rise = plan.rule.rise(times)
                    # Seen at two polls in a row: tested at every poll, noise alone would
                    # show one now and then (a cap's rise stays).
                    if rise is not None and rise_seen is not None:
                        self.rose = rise
                        break  # measured again (`runner`): its further steps are spent for nothing
                    rise_seen = rise
                if not self.load.is_alive():
                    break  # the batch finished or failed: no more steps will come
        # Ending the round must happen even past its deadline (a short bound of its own).
        with client.deadline(time.monotonic() + END_OF_ROUND_SECONDS, self.where):
            client.abort_all()
            self.load.join(LOAD_JOIN_TIMEOUT_SECONDS)
            if self.load.is_alive():
                logger.warning(
                    "%s: the load did not return within %.0f s of the abort.",
                    self.where,
                    LOAD_JOIN_TIMEOUT_SECONDS,
                )
            final = session.fetch_rows_retrying()
        self.wall = time.monotonic() - self.started
        rows = self._new_rows(final)
        self.clock_end = self.clock_start + (sum(r.step_time for r in rows[0]) if rows else 0.0)
        return rows

    def abandon(self) -> None:
        """Stop this round's load after the run failed (best effort: the server may be gone)."""
        client = self.session.client
        try:
            with client.deadline(time.monotonic() + END_OF_ROUND_SECONDS, self.where):
                client.abort_all()
        except Exception as exc:
            logger.warning("%s: could not abort the next round's load: %s", self.where, exc)
        self.load.join(LOAD_JOIN_TIMEOUT_SECONDS)

    def measure(self, rank_rows: list[list[StepRow]]) -> MeasuredRound:
        """Validate the round's records and measure its cell (RoundError & co. on bad data)."""
        ctx = self.session.context
        load_info = {
            "num_requests": self.cell.bs * ctx.dp_size,
            "input_len": self.plan.rule.prompt_len,
            "max_new_tokens": self.plan.max_new_tokens,
            "wall_seconds": round(self.wall, 3),
            "reached_target": self.reached,
            "load_error": self.load.error,
            "decode_seconds": round(
                sum(r.step_time for r in rank_rows[0]) if rank_rows else 0.0, 6
            ),
        }
        outcome = postprocess_round(
            rank_rows,
            repeat=self.cell.repeat,
            bs=self.cell.bs,
            dp_size=ctx.dp_size,
            gamma=ctx.gamma,
            mode=ctx.mode,
            tiers=ctx.tiers,
            frac=self.cell.frac,
            rule=self.plan.rule,
            load_info=load_info,
            clock_start=self.clock_start,
            carried=self.carried,
        )
        if self.rose is not None and outcome.level_rise is None:
            # Its last steps may no longer show the rise they showed live: still not kept.
            outcome = dataclasses.replace(outcome, level_rise=self.rose)
        if self.stopped_early and outcome.level_rise is None:
            late = drift_after_an_early_stop(outcome)
            if late is not None:
                outcome = dataclasses.replace(outcome, level_rise=late)
        return MeasuredRound(outcome=outcome, rank_rows=rank_rows)


def record_lines(measured: MeasuredRound) -> list[dict[str, Any]]:
    o = measured.outcome
    lines = []
    for rank, rows in enumerate(measured.rank_rows):
        for row in rows:
            line = {
                "repeat": o.repeat,
                "batch_size": o.bs * o.dp_size,
                "batch_size_per_rank": o.bs,
                "frac": o.frac,
                "dp_rank": rank,
            }
            line.update(row.to_record())
            lines.append(line)
    return lines


def _step_ar1(series: Sequence[float]) -> float:
    """The warm-up steps' lag-1 correlation at the top of its margin (`fit_ramp`)."""
    phi, phi_se = ar1_from_differences(series)
    return phi + AR1_MARGIN_SE * phi_se
