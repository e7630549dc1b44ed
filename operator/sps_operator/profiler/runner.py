"""The sweep driver: talks to the server through `DsparkClient`, keeps the raw data safe.

Thin on purpose: what a round means lives in `rounds`, how one is driven on the server in
`active_round` (its plan in `round_plans`, the server state kept across rounds in
`session`), what the server allows in `server_info`, the sweep in `sweep`, files in
`artifacts`.
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sps_operator.dspark_arith import pinned_verify_tokens, round_up
from sps_operator.profiler import artifacts
from sps_operator.profiler.active_round import ActiveRound, MeasuredRound, record_lines
from sps_operator.profiler.client import DsparkClient, ServerUnavailableError
from sps_operator.profiler.cross_round import Level, replaces
from sps_operator.profiler.remeasure import Remeasures, round_levels
from sps_operator.profiler.round_plans import round_plan, warmup_plan
from sps_operator.profiler.rounds import PinNotTakenError, RoundError, SteadySeries, StepRow
from sps_operator.profiler.server_info import (
    ServerCheckError,
    ServerContext,
    server_context_from_info,
    validate_sweep,
)
from sps_operator.profiler.session import Session
from sps_operator.profiler.steady import Ar1Prior
from sps_operator.profiler.sweep import (
    PROFILE_SEED,
    RANDOM_TOKEN_HIGH_MARGIN,
    RANDOM_TOKEN_LOW,
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
    stranded_rounds,
    thinned,
)

logger = logging.getLogger(__name__)

PREFLIGHT_STEADY_STEPS = 8
# A cell whose round rose is measured again after this many other rounds (when as many are
# left before the anchor): a cap lasts seconds, longer than one round.
RISE_REMEASURE_AFTER = 2
FALLBACK_VOCAB_SIZE = 32000

# Records a concluded round: (its cell, the round, whether it replaces the cell's round
# recorded before: `cross_round.replaces`).
Recorder = Callable[[SweepCell, MeasuredRound, bool], None]


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
        session, again = Session(client, context, vocab, cfg.settings.temperature), Remeasures()
        pin_reset: str | None = None

        def record(cell: SweepCell, measured: MeasuredRound, replace: bool = False) -> None:
            summary = measured.outcome.to_summary() | measured.extra
            if "clock_s" in summary:
                # Which run's clock: a resumed run starts a clock of its own.
                summary["clock_run"] = run_id
            artifacts.append_lines(paths.records, record_lines(measured))
            if artifacts.store_round(paths, rounds, summary, cell.key if replace else None):
                progress.done -= 1  # the same cell, not one more
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
                _drive(session, cfg, _jobs(session, cfg, todo), record, rounds, again)
            except ServerUnavailableError as exc:
                raise ServerUnavailableError(
                    f"The server stopped answering mid-sweep ({exc}); the {len(rounds)} "
                    f"rounds measured so far are in {paths.rounds} — restart the server "
                    "and rerun with --resume."
                ) from exc
        except BaseException as exc:
            if cfg.fracs is not None:
                pin_reset = _safe_reset(session)
            manifest("failed", pin_reset, {"error": str(exc)} | again.manifest())
            raise
        if cfg.fracs is not None:
            pin_reset = _safe_reset(session)
        if not rounds:
            raise ProfilerError("No rounds were measured.")
        data = manifest("succeeded", pin_reset, again.manifest())
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


def _start_round(
    session: Session,
    settings: RoundSettings,
    queue: Sequence[Job],
    index: int,
    clock: float,
    warmup_history: list[float],
    probe: list[Chunk],
    recent: Sequence[int],
    correlations: Sequence[tuple[float, float]],
    warmup_previous: SteadySeries | None = None,
    end_on_rise: bool = False,
) -> ActiveRound | None:
    """Start the round of queue[index] (None past the end), planned for its kind from what
    the rounds before it showed; `end_on_rise`: a rise would be measured again, so the round
    ends as soon as one shows."""
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
            previous=warmup_previous,
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
    return ActiveRound(session, cell, settings, plan, clock_start=clock, end_on_rise=end_on_rise)


def _drive(
    session: Session,
    cfg: RunConfig,
    jobs: Sequence[Job],
    record: Recorder,
    rounds: Sequence[dict[str, Any]],
    again: Remeasures,
) -> None:
    """Run the rounds back to back: the next one starts as soon as this one's records are
    read, before they are validated and written, so the GPU does not idle in between.
    Once every cell is measured, cells out of line with the others (`rounds`, as recorded,
    read as the fit reads them) are measured again (`remeasure`); one still out of line
    when its rechecks are spent fails the run."""
    settings = cfg.settings
    recent: list[int] = []  # steady steps of the last rounds: the next one's expected length
    correlations: list[tuple[float, float]] = []  # measured rounds' step (φ, se): the prior
    queue: list[Job] = list(jobs)
    warmup_history: list[float] = []  # steady step times of the warm-up rounds so far
    warmup_previous: SteadySeries | None = None  # the last of them, as a series
    # The warm-up ended on a live ramp: the rounds until the anchor are measured on it.
    on_ramp = False
    probe: list[Chunk] = []  # the same, as the clock-ramp model's chunks
    clock = 0.0  # seconds of decode steps since the run's first: the ramp's time axis

    def start(index: int) -> ActiveRound | None:
        end_on_rise = index < len(queue) and again.ends_on_rise(*queue[index])
        return _start_round(
            session,
            again.starting(*queue[index], settings, clock) if index < len(queue) else settings,
            queue,
            index,
            clock,
            warmup_history,
            probe,
            recent,
            correlations,
            warmup_previous,
            end_on_rise,
        )

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
                warmup_previous = active.steady_part(rows)
                probe.extend(chunk_series(warmup_previous.times, warmup_previous.clocks))
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
                _note_measured(measured, active, kind, rows, on_ramp, probe, correlations)
        except RoundError as exc:
            failure = exc
        if stands_for_cell and measured is None and not isinstance(failure, PinNotTakenError):
            queue.append(("cell", cell))  # measured on a round of its own after all
        window = (active.clock_start, active.clock_end)
        if measured is not None and again.rose(kind, cell, measured, window):
            # Later, so the cap whose start the rise saw has time to end (`_rise_remeasure_at`).
            queue.insert(_rise_remeasure_at(queue, index), (kind, cell))
            if following is None:
                following = start(index + 1)
            active = following
            index += 1
            continue
        try:
            _conclude(kind, cell, active, measured, failure, record, rounds, again)
        except BaseException:
            if following is not None:
                following.abandon()
            raise
        if following is None:
            queue.extend(_rechecks(again, rounds, cfg))
            following = start(index + 1)
        active = following
        index += 1


def _rechecks(again: Remeasures, rounds: Sequence[dict[str, Any]], cfg: RunConfig) -> list[Job]:
    """Once the queue is empty: the cells out of line to measure again; none left to
    measure again while some still are out of line fails the run."""
    rechecks = again.rechecks(rounds)
    left = again.left_out_of_line(rounds) if not rechecks else {}
    if left:
        raise ProfilerError(
            "Rounds still out of line with the others after measuring them again "
            "(a GPU throttling for longer than the run could wait out?): "
            + "; ".join(f"bs={bs} frac={frac}: {why}" for (_r, bs, frac), why in left.items())
            + f". The rounds are in {artifacts.OutPaths.for_out(cfg.out).rounds}; "
            "rerun when the GPU is not capped (check its clocks and power limit)."
        )
    return rechecks


def _rise_remeasure_at(queue: Sequence[Job], index: int) -> int:
    """Where the cell of the round at `index`, whose steps rose, is measured again: after
    `RISE_REMEASURE_AFTER` rounds if as many come before the anchor (the run's order, anchor
    last, holds), never before the round already started (index + 1). Right after the next
    round (before issue 37) it often lay inside the same cap."""
    anchors = [i for i in range(index + 1, len(queue)) if queue[i][0] == "anchor"]
    latest = anchors[0] if anchors else len(queue)
    return max(index + 2, min(index + 1 + RISE_REMEASURE_AFTER, latest))


def _note_measured(
    measured: MeasuredRound,
    active: ActiveRound,
    kind: RoundKind,
    rows: Sequence[Sequence[StepRow]],
    on_ramp: bool,
    probe: Sequence[Chunk],
    correlations: list[tuple[float, float]],
) -> None:
    """What a measured round leaves for the next ones (its steps' correlation, the prior)
    and for the fit (whether it ran on the clock ramp; the anchor's ramp chunks)."""
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


def _conclude(
    kind: RoundKind,
    cell: SweepCell,
    active: ActiveRound,
    measured: MeasuredRound | None,
    failure: RoundError | None,
    record: Recorder,
    rounds: Sequence[dict[str, Any]],
    again: Remeasures,
) -> None:
    """What a finished round means for the run; a recheck replaces the cell's recorded round
    (as the fit reads it: `remeasure.round_levels`) only if it is faster beyond noise."""
    recheck = again.is_recheck(kind, cell)
    if recheck and failure is not None:
        again.concluded(cell, False)
        logger.warning(
            "Round bs=%d frac=%s measured again failed (%s): the first round stands.",
            cell.bs,
            cell.frac,
            failure,
        )
        return
    if measured is not None and kind != "pre-flight" and failure is None:
        level = _level_of(cell, measured)
        if recheck:
            first = round_levels(rounds).levels.get(cell.key)
            again.concluded(cell, first is not None and replaces(first, level))
            if first is None or not replaces(first, level):
                logger.warning(
                    "Round bs=%d frac=%s measured again reads %.4g s against %.4g s: the "
                    "first round stands.",
                    cell.bs,
                    cell.frac,
                    level.step_time,
                    first.step_time if first else float("nan"),
                )
                return
            record(cell, measured, True)
            return
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
            record(cell, measured, False)
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
    record(cell, measured, False)


def _level_of(cell: SweepCell, measured: MeasuredRound) -> Level:
    stats = measured.outcome.stats
    return Level(cell.key, measured.outcome.batch_tokens, stats.median, stats.se)


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
]
