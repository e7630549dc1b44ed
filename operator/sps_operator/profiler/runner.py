"""The sweep driver: talks to the server through `DsparkClient`, keeps the raw data safe.

Thin on purpose: what a round means lives in `rounds`, what the server allows in
`server`, the sweep in `sweep`, files in `artifacts`.
"""

from __future__ import annotations

import json
import logging
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sps_operator.dspark_arith import pinned_verify_tokens, round_up
from sps_operator.profiler import artifacts
from sps_operator.profiler.client import DsparkClient, LoadThread, ServerUnavailableError
from sps_operator.profiler.rounds import (
    PinExpectation,
    PinNotTakenError,
    RoundError,
    RoundGoal,
    RoundOutcome,
    StepRow,
    StoppingRule,
    align,
    check_pin,
    live_progress,
    postprocess_round,
    round_finished,
    rows_from_payload,
    steady_with_clocks,
)
from sps_operator.profiler.server import (
    INFO_RECORD_PAYLOAD_KEY,
    ServerCheckError,
    ServerContext,
    server_context_from_info,
    validate_sweep,
)
from sps_operator.profiler.steady import (
    AR1_MARGIN_SE,
    MIN_SETTLE_SECONDS,
    Ar1Prior,
    ar1_from_differences,
    still_falling,
)
from sps_operator.profiler.sweep import (
    PROFILE_SEED,
    RANDOM_TOKEN_HIGH_MARGIN,
    RANDOM_TOKEN_LOW,
    ROUND_WARMUP_STEPS,
    Job,
    RoundKind,
    RoundSettings,
    SweepCell,
    after_warmup_round,
    build_cells,
    build_jobs,
    cell_key_of_round,
    round_max_new_tokens,
)
from sps_operator.tables.clockramp import (
    CHUNK_STEPS,
    MIN_CHUNKS,
    Chunk,
    chunk_series,
    ramp_evident,
    stranded_rounds,
    thinned,
)

logger = logging.getLogger(__name__)

LOAD_JOIN_TIMEOUT_SECONDS = 60.0
POLL_FAILURES_BEFORE_GIVING_UP = 5
PREFLIGHT_STEADY_STEPS = 8
# The warm-up rounds run until the clocks have settled, but never longer than this (steady
# steps over all of them).
MAX_WARMUP_STEPS = 3000
# Aborting, joining the load and reading the last records after a round's deadline.
END_OF_ROUND_SECONDS = 30.0
FALLBACK_VOCAB_SIZE = 32000
# A cell whose round straddled a clock cap (its steps rose: `steady.level_rise`) is measured
# again up to this many times; the last round is kept whatever it shows (flagged by its CI
# and drift), so a GPU that is always capped still gets a table the gates can judge.
MAX_RISE_REMEASURES = 2

ProgressHook = Callable[[int, int], None]


class ProfilerError(RuntimeError):
    """A run that cannot produce a valid table; the message says what to do."""


@dataclass
class RunConfig:
    base_url: str
    batch_sizes: list[int]
    fracs: list[float] | None
    settings: RoundSettings
    out: str
    repeats: int = 1
    vocab_size: int | None = None
    local_tokenizer_path: str | None = None
    resume: bool = False
    progress: bool = False
    wait_for_server: float | None = None
    preflight: bool = True
    warmup: bool = True
    http_timeout: float = 600.0


@dataclass
class RunSummary:
    paths: artifacts.OutPaths
    rounds: list[dict[str, Any]]
    manifest: dict[str, Any]
    context: ServerContext
    pin_reset: str | None = None
    warnings: list[str] = field(default_factory=list)


# --- vocabulary -------------------------------------------------------------------------------


def vocab_size_from_tokenizer_dir(path: str) -> int | None:
    """Vocabulary size from a local tokenizer directory, without torch or downloads."""
    root = Path(path).expanduser()
    if not root.is_dir():
        return None
    config = root / "config.json"
    if config.is_file():
        try:
            value = json.loads(config.read_text()).get("vocab_size")
            if isinstance(value, int) and value > 0:
                return value
        except (OSError, json.JSONDecodeError):
            pass
    tokenizer = root / "tokenizer.json"
    if tokenizer.is_file():
        try:
            data = json.loads(tokenizer.read_text())
            vocab = data.get("model", {}).get("vocab", {})
            added = data.get("added_tokens", [])
            size = len(vocab) + len(added)
            return size or None
        except (OSError, json.JSONDecodeError, AttributeError):
            return None
    return None


def resolve_vocab_size(cfg: RunConfig, context: ServerContext) -> int:
    if cfg.vocab_size is not None:
        size: int | None = cfg.vocab_size
    else:
        size = None
        for candidate in (cfg.local_tokenizer_path, context.tokenizer_path):
            if candidate:
                size = vocab_size_from_tokenizer_dir(candidate)
                if size:
                    break
        size = size or context.vocab_size
    if not size:
        # Prompt ids only need to be valid tokens: every DSpark target has >= 32000 of them.
        logger.warning(
            "No vocabulary size found (no local tokenizer directory, no vocab_size in "
            "/server_info); drawing prompt ids below %d. Pass --vocab-size to be exact.",
            FALLBACK_VOCAB_SIZE,
        )
        size = FALLBACK_VOCAB_SIZE
    if size - RANDOM_TOKEN_HIGH_MARGIN <= RANDOM_TOKEN_LOW:
        raise ProfilerError(f"vocab_size={size} is too small for random prompts (need > 2000).")
    return size


# --- progress --------------------------------------------------------------------------------


class Progress:
    """`cell k/n`, elapsed and an estimate, on stderr when enabled."""

    def __init__(self, total: int, done: int, enabled: bool, stream: TextIO | None = None) -> None:
        self.total = total
        self.done = done
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._start_done = done

    def tick(self, label: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        elapsed = time.monotonic() - self.started
        measured = self.done - self._start_done
        eta = elapsed / measured * (self.total - self.done) if measured else 0.0
        self.stream.write(
            f"[sps-profiler] cell {self.done}/{self.total} {label} "
            f"elapsed {_clock(elapsed)} eta {_clock(eta)}\n"
        )
        self.stream.flush()

    @property
    def text(self) -> str:
        return f"{self.done}/{self.total}"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


# --- one round -------------------------------------------------------------------------------


class Session:
    """State kept across rounds: the client, the server context, ring clearing support."""

    def __init__(
        self, client: DsparkClient, context: ServerContext, vocab_size: int, temperature: float
    ) -> None:
        self.client = client
        self.context = context
        self.vocab_size = vocab_size
        self.temperature = temperature
        self.rng = random.Random(PROFILE_SEED)
        self.can_clear: bool | None = None
        self.pinned: float | None = None

    def fetch_rank_rows(self) -> list[list[StepRow]]:
        info = self.client.server_info()
        states = info.get("internal_states") if isinstance(info, dict) else None
        if not isinstance(states, list):
            raise RoundError("/server_info lost its internal_states mid-profile.")
        return [
            rows_from_payload(state.get(INFO_RECORD_PAYLOAD_KEY), rank)
            for rank, state in enumerate(states)
            if isinstance(state, dict)
        ]

    def fetch_rows_retrying(self) -> list[list[StepRow]]:
        failures = 0
        while True:
            try:
                return self.fetch_rank_rows()
            except ServerUnavailableError:
                failures += 1
                if failures >= POLL_FAILURES_BEFORE_GIVING_UP:
                    raise
                time.sleep(0.2 * failures)

    def clear_records(self) -> bool:
        """Empty the record ring so every poll ships only this round's steps."""
        if self.can_clear is False:
            return False
        ok, answer = self.client.set_internal_state({"dspark_clear_info_records": True})
        if not ok and self.can_clear is None:
            logger.warning(
                "The server does not accept dspark_clear_info_records (%s); polling the full "
                "record ring instead (slower on long runs).",
                answer,
            )
        self.can_clear = ok
        return ok

    def pin(self, frac: float) -> None:
        if self.pinned == frac:
            return
        ok, answer = self.client.set_internal_state({"dspark_force_budget_frac": frac})
        if not ok:
            raise PinNotTakenError(
                f"The server rejected dspark_force_budget_frac={frac} ({answer}). Off-diagonal "
                "profiling needs a DSpark server in compact mode that accepts the pin."
            )
        self.pinned = frac

    def reset_pin(self) -> str:
        ok, answer = self.client.set_internal_state({"dspark_force_budget_frac": None})
        if ok:
            self.pinned = None
            return "reset"
        logger.warning(
            "This server cannot reset the budget pin (it rejected dspark_force_budget_frac=null: "
            "%s); it stays pinned at frac=%s until the server restarts. Restart it before it "
            "serves traffic.",
            answer,
            self.pinned,
        )
        return "rejected"

    def load_payload(self, num_requests: int, plan: RoundPlan) -> dict[str, Any]:
        high = self.vocab_size - RANDOM_TOKEN_HIGH_MARGIN
        input_ids = [
            [self.rng.randrange(RANDOM_TOKEN_LOW, high) for _ in range(plan.rule.prompt_len)]
            for _ in range(num_requests)
        ]
        return {
            "input_ids": input_ids,
            "sampling_params": {
                "temperature": self.temperature,
                "max_new_tokens": plan.max_new_tokens,
                "ignore_eos": True,
            },
            "stream": False,
        }


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
    growing while its forward_ct moves on (the oldest were evicted)."""

    def __init__(self, where: str, round_steps: int) -> None:
        self.where = where
        self.round_steps = round_steps
        self._seen: list[tuple[int, int]] | None = None

    def check(self, rank_rows: Sequence[Sequence[StepRow]]) -> None:
        seen = [(len(rows), max((r.forward_ct for r in rows), default=-1)) for rows in rank_rows]
        if self._seen is not None:
            for rank, ((count, top), (before, top_before)) in enumerate(
                zip(seen, self._seen, strict=False)
            ):
                if count and count <= before and top > top_before:
                    raise RoundError(
                        f"{self.where}: ring too small: DP rank {rank}'s record ring holds only "
                        f"{count} decode records, and a round needs up to {self.round_steps}; "
                        "the oldest steps of this round were evicted. Raise the server's record "
                        "ring (SGLang's INFO_DUMP_MAX_RECORDS; sps-sim --record-ring-size) or "
                        "lower --max-steady-steps."
                    )
        self._seen = seen


@dataclass(frozen=True)
class RoundPlan:
    """How one round is driven: its prompts and requests' length, when it stops."""

    rule: StoppingRule
    max_new_tokens: int
    step_budget: int
    # "settle" (the warm-up): keep the load running until the clocks have settled;
    # "probe" (the pre-flight): stop once the pin is seen on enough steps.
    goal: RoundGoal = "measure"


def round_plan(
    settings: RoundSettings,
    min_steps: int | None = None,
    expected_steps: int | None = None,
    goal: RoundGoal = "measure",
    ar1_prior: Ar1Prior | None = None,
) -> RoundPlan:
    """A measuring round; prompts centre `expected_steps` steady steps on `--context-len`;
    `ar1_prior`: the step correlation the run's rounds have shown so far."""
    rule = StoppingRule(
        ci_rel_width=settings.ci_rel_width,
        min_steps=min_steps or settings.min_steps,
        prompt_len=settings.prompt_len_for(expected_steps),
        reference_context=settings.context_len,
        ar1_prior=ar1_prior,
    )
    return RoundPlan(rule, round_max_new_tokens(settings), settings.step_budget, goal)


def warmup_plan(settings: RoundSettings) -> RoundPlan:
    """The first cell's own round, kept going until the clocks have settled (then on as
    that cell's measuring round): its requests are the cell's, so the steps it measures
    sit at the context the table describes, however long the clocks took."""
    return round_plan(settings, goal="settle")


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
    ) -> None:
        self.session, self.cell, self.settings, self.plan = session, cell, settings, plan
        # Warm-up only: the steady step times of the warm-up rounds before this one, and
        # their chunks on the run clock (the ramp model's probe).
        self.history = list(history)
        self.probe = list(probe)
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

    @property
    def warmup_done(self) -> bool:
        return self.settled or self.capped

    def chunks(self, rank_rows: Sequence[Sequence[StepRow]]) -> list[Chunk]:
        """This round's steady steps as the ramp model's chunks on the run clock."""
        times, clocks = steady_with_clocks(
            rank_rows,
            bs=self.cell.bs,
            prompt_len=self.plan.rule.prompt_len,
            pinned=self.cell.frac is not None,
            clock_start=self.clock_start,
        )
        return chunk_series(times, clocks)

    def _ramp_probed(self, rank_rows: Sequence[Sequence[StepRow]], times: Sequence[float]) -> bool:
        """Warm-up: has it covered `MIN_SETTLE_SECONDS`, do its steps still fall (the ramp is
        live), and does the model describe them (`ramp_evident`)?"""
        series = [*self.history, *times]
        if sum(series) < MIN_SETTLE_SECONDS or not still_falling(series, z=self.plan.rule.z):
            return False
        tolerance = self.plan.rule.ci_rel_width / 2
        phi, phi_se = ar1_from_differences(series)
        step_ar1 = phi + AR1_MARGIN_SE * phi_se
        return ramp_evident([*self.probe, *self.chunks(rank_rows)], tolerance, step_ar1)

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
                    rank_rows, bs=self.cell.bs, rule=plan.rule, pinned=self.cell.frac is not None
                )
                self.steady_steps = len(times)
                self.steady_times = times
                if goal == "settle" and round_finished(
                    "settle", plan.rule, stats, times, MAX_WARMUP_STEPS, self.history
                ):
                    self.capped = len(self.history) + len(times) >= MAX_WARMUP_STEPS
                    self.settled = not self.capped
                    goal = "measure"  # on as the cell's round, judged from its first step
                elif goal == "settle" and self._ramp_probed(rank_rows, times):
                    self.probed = True
                    break  # the sweep starts; this cell is measured again at the end
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
                    and round_finished(goal, plan.rule, stats, times, plan.step_budget)
                ):
                    self.reached = stats is not None and stats.done
                    break
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
        )
        return MeasuredRound(outcome=outcome, rank_rows=rank_rows)


def run_round(
    session: Session, cell: SweepCell, settings: RoundSettings, plan: RoundPlan | None = None
) -> MeasuredRound:
    """One round on its own (nothing runs after it)."""
    active = ActiveRound(session, cell, settings, plan or round_plan(settings))
    return active.measure(active.wait())


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


# --- pre-flight probe ------------------------------------------------------------------------


def preflight_cell(
    context: ServerContext, batch_sizes: Sequence[int], fracs: Sequence[float]
) -> SweepCell | None:
    """Smallest bs whose smallest frac must replay a smaller graph than full width (§9.5)."""
    if context.mode != "compact" or not fracs:
        return None
    tiers = context.tiers
    frac = min(fracs)
    for bs in sorted(batch_sizes):
        m = pinned_verify_tokens(frac, bs, context.gamma)
        expected = round_up(tiers, m)
        full = round_up(tiers, bs * context.verify_num_draft_tokens)
        if expected is not None and full is not None and expected < full:
            return SweepCell(repeat=-1, bs=bs, frac=frac)
    return None


# --- the sweep -------------------------------------------------------------------------------


def _sweep_dict(cfg: RunConfig) -> dict[str, Any]:
    return {
        "batch_sizes": cfg.batch_sizes,
        "fracs": cfg.fracs,
        "repeats": cfg.repeats,
        "seed": PROFILE_SEED,
    }


def run_profile(
    cfg: RunConfig, on_progress: Callable[[str, list[dict[str, Any]]], None] | None = None
) -> RunSummary:
    """Measure every cell; append each round as it ends. Raises ProfilerError & co on bad input."""
    paths = artifacts.OutPaths.for_out(cfg.out)
    paths.table.parent.mkdir(parents=True, exist_ok=True)
    with DsparkClient(cfg.base_url, timeout=cfg.http_timeout) as client:
        if cfg.wait_for_server:
            client.wait_until_healthy(cfg.wait_for_server)
        context = server_context_from_info(
            client.server_info(),
            base_url=client.base_url,
            offdiagonal=cfg.fracs is not None,
            vocab_size=cfg.vocab_size,
            tokenizer_path=cfg.local_tokenizer_path,
        )
        vocab = resolve_vocab_size(cfg, context)
        warnings = validate_sweep(
            context,
            cfg.batch_sizes,
            input_len=cfg.settings.prompt_len,
            max_new_tokens=round_max_new_tokens(cfg.settings),
        )
        for w in warnings:
            logger.warning("%s", w)
        rounds = _prepare_raw_files(cfg, paths, context)
        stranded = set(stranded_rounds(rounds))
        if stranded:
            logger.warning(
                "--resume: %d rounds were measured on a clock ramp by a run interrupted "
                "before its anchor round; their slow-down cannot be taken out, so their "
                "cells are measured again.",
                len(stranded),
            )
        done = {cell_key_of_round(r) for i, r in enumerate(rounds) if i not in stranded}
        cells = build_cells(cfg.batch_sizes, cfg.fracs, cfg.repeats)
        todo = [c for c in cells if c.key not in done]
        progress = Progress(len(cells), len(cells) - len(todo), cfg.progress)
        started_at = time.time()
        run_id = f"{started_at:.6f}"
        server_dict = context.to_dict()

        def manifest(
            status: str, pin_reset: str | None, extra: dict[str, Any] | None = None
        ) -> dict[str, Any]:
            data = artifacts.build_manifest(
                paths=paths,
                server=server_dict,
                sweep=_sweep_dict(cfg),
                settings=cfg.settings.to_dict(),
                rounds=rounds,
                status=status,
                pin_reset=pin_reset,
                started_at=started_at,
                extra=extra,
            )
            artifacts.write_json_atomic(paths.manifest, data)
            return data

        manifest("running", None)
        session = Session(client, context, vocab, cfg.settings.temperature)
        pin_reset: str | None = None

        def record(cell: SweepCell, measured: MeasuredRound) -> None:
            summary = measured.outcome.to_summary() | measured.extra
            if "clock_s" in summary:
                # Which run's clock: a resumed run starts a clock of its own.
                summary["clock_run"] = run_id
            artifacts.append_lines(paths.records, record_lines(measured))
            artifacts.append_lines(paths.rounds, [summary])
            rounds.append(summary)
            for w in measured.outcome.warnings:
                logger.warning("%s", w)
            progress.tick(
                f"bs={cell.bs} frac={cell.frac}: {summary['steps_per_sec']:.2f} steps/s "
                f"(CI {summary['ci_rel_width']:.1%}, {summary['num_steady_steps']} steps)"
            )
            if on_progress:
                on_progress(progress.text, rounds)

        try:
            try:
                _drive(session, cfg, _jobs(session, cfg, todo), record)
            except ServerUnavailableError as exc:
                raise ServerUnavailableError(
                    f"The server stopped answering mid-sweep ({exc}); the {len(rounds)} "
                    f"rounds measured so far are in {paths.rounds} — restart the server "
                    "and rerun with --resume."
                ) from exc
        except BaseException as exc:
            if cfg.fracs is not None:
                pin_reset = _safe_reset(session)
            manifest("failed", pin_reset, {"error": str(exc)})
            raise
        if cfg.fracs is not None:
            pin_reset = _safe_reset(session)
        if not rounds:
            raise ProfilerError("No rounds were measured.")
        data = manifest("succeeded", pin_reset)
        return RunSummary(paths, rounds, data, context, pin_reset, warnings)


def _jobs(session: Session, cfg: RunConfig, todo: Sequence[SweepCell]) -> list[Job]:
    probe: SweepCell | None = None
    if todo and cfg.fracs and cfg.preflight:
        probe = preflight_cell(session.context, cfg.batch_sizes, cfg.fracs)
        if probe is None:
            logger.info(
                "Pre-flight probe skipped: no bs in the sweep whose pin must shrink the graph."
            )
    return build_jobs(todo, warmup=cfg.warmup, probe=probe)


def _drive(
    session: Session,
    cfg: RunConfig,
    jobs: Sequence[Job],
    record: Callable[[SweepCell, MeasuredRound], None],
) -> None:
    """Run the rounds back to back: the next one starts as soon as this one's records are
    read, before they are validated and written, so the GPU does not idle in between."""
    settings = cfg.settings
    recent: list[int] = []  # steady steps of the last rounds: the next one's expected length
    correlations: list[tuple[float, float]] = []  # measured rounds' step (φ, se): the prior
    queue: list[Job] = list(jobs)
    warmup_history: list[float] = []  # steady step times of the warm-up rounds so far
    # The warm-up ended on a live ramp: the rounds until the anchor are measured on it.
    on_ramp = False
    probe: list[Chunk] = []  # the same, as the clock-ramp model's chunks
    clock = 0.0  # seconds of decode steps since the run's first: the ramp's time axis
    remeasured: dict[tuple[int, int, float | None], int] = {}  # rises measured again, per cell

    def start(index: int) -> ActiveRound | None:
        if index >= len(queue):
            return None
        kind, cell = queue[index]
        if kind == "warm-up":
            return ActiveRound(
                session,
                cell,
                settings,
                warmup_plan(settings),
                warmup_history,
                clock_start=clock,
                probe=probe,
            )
        if kind == "pre-flight":
            plan = round_plan(settings, PREFLIGHT_STEADY_STEPS, goal="probe")
        elif kind == "anchor":
            # The warm-up's prompts: the same KV context per step; enough steps for the
            # ramp model's chunks (`clockramp.MIN_CHUNKS`).
            plan = round_plan(
                settings,
                min_steps=max(settings.min_steps, MIN_CHUNKS * CHUNK_STEPS),
                ar1_prior=Ar1Prior.pooled(correlations),
            )
        else:
            expected = int(statistics.median(recent[-3:])) if recent else None
            plan = round_plan(
                settings, expected_steps=expected, ar1_prior=Ar1Prior.pooled(correlations)
            )
        return ActiveRound(session, cell, settings, plan, clock_start=clock)

    active = start(0)
    index = 0
    while index < len(queue):
        kind, cell = queue[index]
        assert active is not None
        failure: RoundError | None = None
        measured: MeasuredRound | None = None
        rows: list[list[StepRow]] = []
        try:
            rows = active.wait()
        except RoundError as exc:
            failure = exc
        clock = active.clock_end
        measures = kind != "warm-up" or active.warmup_done
        # A settled warm-up round stands for its cell: the cell's own round is dropped.
        stands_for_cell = kind == "warm-up" and failure is None and active.warmup_done
        if kind == "warm-up" and failure is None:
            if not active.warmup_done:
                warmup_history.extend(active.steady_times)
                probe.extend(active.chunks(rows))
            queue = after_warmup_round(
                queue, index, settled=active.warmup_done, probed=active.probed
            )
            on_ramp = on_ramp or active.probed
        if measures and kind != "pre-flight" and active.steady_steps:
            recent.append(active.steady_steps)
        following = start(index + 1)
        try:
            if failure is None and measures:
                measured = active.measure(rows)
                window = measured.outcome.stats.window
                correlations.append((window.ar1, window.ar1_se))
                if kind == "cell" and on_ramp:
                    # Usable only with this run's anchor (`clockramp.stranded_rounds`).
                    measured.extra["clock_on_ramp"] = True
                if kind == "anchor":
                    anchor = active.chunks(rows)
                    measured.extra["clock_ramp"] = {
                        "probe": [list(c) for c in thinned(probe)],
                        "anchor": [list(c) for c in thinned(anchor)],
                    }
        except RoundError as exc:
            failure = exc
        if stands_for_cell and measured is None and not isinstance(failure, PinNotTakenError):
            queue.append(("cell", cell))  # measured on a round of its own after all
        rise = measured.outcome.level_rise if measured is not None else None
        if (
            kind == "cell"
            and rise is not None
            and remeasured.get(cell.key, 0) < MAX_RISE_REMEASURES
        ):
            remeasured[cell.key] = remeasured.get(cell.key, 0) + 1
            logger.warning(
                "Round bs=%d frac=%s: its step times rose by %.1f%% mid-round beyond KV growth "
                "(a clock cap setting in?); not averaged in, measured again (%d of %d).",
                cell.bs,
                cell.frac,
                rise * 100,
                remeasured[cell.key],
                MAX_RISE_REMEASURES,
            )
            # Right after the round already started, so the run's order (a ramp's anchor
            # last) holds.
            queue.insert(index + 2, ("cell", cell))
            if following is None:
                following = start(index + 1)
            active = following
            index += 1
            continue
        try:
            _conclude(kind, cell, active, measured, failure, record)
        except BaseException:
            if following is not None:
                following.abandon()
            raise
        active = following
        index += 1


def _conclude(
    kind: RoundKind,
    cell: SweepCell,
    active: ActiveRound,
    measured: MeasuredRound | None,
    failure: RoundError | None,
    record: Callable[[SweepCell, MeasuredRound], None],
) -> None:
    """What a finished round means for the run."""
    if kind == "warm-up":
        if isinstance(failure, PinNotTakenError):
            raise failure
        if failure is not None:
            logger.warning(
                "Warm-up round failed (%s); continuing (the cell gets a round of its own).",
                failure,
            )
            return
        if active.capped:
            logger.warning(
                "The clocks were still speeding up after %d warm-up steps; the first rounds "
                "may measure them warming (their drift check waits it out or widens their CI).",
                len(active.history) + active.steady_steps,
            )
        if measured is not None:
            record(cell, measured)
        return
    if kind == "pre-flight":
        if isinstance(failure, PinNotTakenError):
            raise PinNotTakenError(
                f"Pre-flight probe failed, nothing measured. {failure}"
            ) from failure
        if failure is not None:
            logger.warning(
                "Pre-flight probe inconclusive (%s); the per-round checks still apply.", failure
            )
        return
    if failure is not None:
        raise failure
    assert measured is not None
    record(cell, measured)


def _safe_reset(session: Session) -> str:
    if session.pinned is None:
        return "not-needed"  # this run never pinned (e.g. a resume with nothing left to do)
    try:
        return session.reset_pin()
    except Exception as exc:  # the server may be the thing that failed
        logger.warning("Could not reset the budget pin: %s", exc)
        return f"failed: {exc}"


def _prepare_raw_files(
    cfg: RunConfig, paths: artifacts.OutPaths, context: ServerContext
) -> list[dict[str, Any]]:
    if cfg.resume:
        for path in paths.raw_files():
            dropped = artifacts.drop_torn_tail(path)
            if dropped:
                logger.warning(
                    "--resume: %s ended in a torn line (an interrupted write); dropped its %d "
                    "bytes so new rounds start on a line of their own. That cell is measured "
                    "again.",
                    path,
                    dropped,
                )
        rounds = artifacts.read_jsonl(paths.rounds)
        if rounds and paths.manifest.exists():
            try:
                previous = json.loads(paths.manifest.read_text())
            except json.JSONDecodeError:
                previous = {}
            before = previous.get("fingerprint")
            if before and before != context.fingerprint:
                raise ProfilerError(
                    f"--resume: the server's fingerprint {context.fingerprint} differs from the "
                    f"interrupted run's {before} (model, layout or capture config changed); the "
                    "old rounds would mix two setups. Start a fresh run without --resume."
                )
            if previous.get("fracs") != cfg.fracs:
                raise ProfilerError(
                    f"--resume: --fracs {cfg.fracs} differ from the interrupted run's "
                    f"{previous.get('fracs')}; use the same sweep or start fresh."
                )
        logger.info("Resuming: %d rounds already measured in %s", len(rounds), paths.rounds)
        return rounds
    moved = artifacts.set_aside(paths.raw_files())
    for path in moved:
        logger.warning("Kept the previous run's %s as %s", path.name.split(".")[0], path)
    return []


__all__ = [
    "ProfilerError",
    "RunConfig",
    "RunSummary",
    "ServerCheckError",
    "preflight_cell",
    "run_profile",
    "run_round",
]
