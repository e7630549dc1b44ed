"""Which cells are measured again within a run, how many times, and when.

Two reasons (`docs/profiler.md`, "The stopping rule"): a round whose steps rose mid-round
(`steady.level_rise`: a clock cap set in) is measured again right away; and once the queue
is empty, a round out of line with the others (`cross_round`: slower than a round of more
batch tokens, or far above the lines through its neighbours: a cap over the whole round) is
measured again. The rounds are judged as the fit reads them: those measured on a clock ramp
corrected with the run's anchor, and the anchor itself (which a cap can cover too) among
them. A cell still out of line when its rechecks are spent fails the run: its table would
carry a cell the physics says is wrong.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sps_operator.profiler.active_round import MeasuredRound
from sps_operator.profiler.cross_round import (
    Level,
    above_local_fit,
    slow_outliers,
    slower_than_larger,
)
from sps_operator.profiler.sweep import (
    Job,
    RoundKind,
    RoundSettings,
    SweepCell,
    cell_key_of_round,
)
from sps_operator.tables.clockramp import correct_rounds, stranded_rounds

logger = logging.getLogger(__name__)

# A cell whose round straddled a clock cap (its steps rose: `steady.level_rise`) is measured
# again up to this many times; the last round is kept whatever it shows (flagged by its CI
# and drift), so a GPU that is always capped still gets a table the gates can judge.
MAX_RISE_REMEASURES = 2
# A round out of line is measured again up to this many times at a time when an episode as
# long as any this run has seen is over (a round measured again can land inside a cap too:
# a cap over a whole short round recurs) ...
MAX_RECHECKS = 2
# ... and in all at most this many times: when nothing else is left to run, a recheck runs
# before that time rather than idle the GPU (an idle gap re-arms its clock ramp), and one
# that does not replace the first round then proves nothing.
MAX_RECHECK_ROUNDS = 4
# A recheck runs to at most this fraction of `--max-steady-steps`: it only has to tell a
# capped first round (a cap slows by 10 % and more) from a good one beyond 2 standard errors
# (`cross_round.FASTER_Z`), and half a round's steps do that; it stands for its cell if it
# replaces the first, with the CI its steps give (the bound carries it).
RECHECK_STEPS_FRACTION = 0.5
# Rounds out of line whose windows on the run clock are closer than this are taken as one
# episode (a cap over several rounds in a row; the gap between rounds is tens of ms).
EPISODE_GAP_S = 0.5

# Entries of the manifest's `remeasured` kept (the rest only counted: `omitted`), so the
# manifest stays far inside the operator's bound on it (`api/result.MAX_MANIFEST_BYTES`).
MAX_LOG_ENTRIES = 64

CellKey = tuple[int, int, float | None]


@dataclass(frozen=True)
class RoundLevels:
    """The recorded rounds as the check across rounds reads them."""

    levels: dict[CellKey, Level]
    windows: dict[CellKey, tuple[float, float]]  # each round's window on the run clock
    anchors: set[CellKey]  # cells whose round is a clock-ramp anchor


def round_levels(rounds: Sequence[Mapping[str, Any]]) -> RoundLevels:
    """Each recorded round's step time as the fit reads it: rounds measured on a clock ramp
    divided by the ramp model's slow-down over their window, their standard error widened by
    the model's range there; rounds the fit cannot correct (`stranded_rounds`) left out."""
    try:
        corrected, _model = correct_rounds(rounds)
    except ValueError:
        corrected = [dict(r) for r in rounds]  # the fit refuses these; judged raw meanwhile
    stranded = set(stranded_rounds(rounds))
    levels: dict[CellKey, Level] = {}
    windows: dict[CellKey, tuple[float, float]] = {}
    anchors: set[CellKey] = set()
    for index, round_ in enumerate(corrected):
        median, se = round_.get("median_step_time"), round_.get("step_time_se")
        if index in stranded or not isinstance(median, float) or not isinstance(se, float):
            continue
        key = cell_key_of_round(round_)
        if "clock_factor" in round_:
            low, high = round_.get("ci_low"), round_.get("ci_high")
            if isinstance(low, float) and isinstance(high, float):
                se = max(se, (high - low) / (2 * 1.96))
        levels[key] = Level(key, int(round_["batch_tokens"]), median, se)
        clock = round_.get("clock_s")
        if isinstance(clock, Sequence) and len(clock) == 2:
            windows[key] = (float(clock[0]), float(clock[1]))
        if round_.get("clock_ramp") is not None:
            anchors.add(key)
    return RoundLevels(levels, windows, anchors)


def out_of_line(levels: Sequence[Level]) -> dict[CellKey, str]:
    """The cells whose round is out of line with the others, each with why."""
    reasons: dict[CellKey, str] = {}
    for key, larger in slower_than_larger(levels).items():
        reasons[key] = (
            f"slower than the round of bs={larger.key[1]} ({larger.batch_tokens} batch tokens) "
            "beyond noise: step time cannot fall as the batch grows"
        )
    for key in slow_outliers(levels):
        reasons.setdefault(key, "far slower than the lines through its nearest neighbours")
    for key in above_local_fit(levels):
        reasons.setdefault(key, "far slower than the line fitted through its nearest neighbours")
    return reasons


def episode_spans(windows: Sequence[tuple[float, float]]) -> list[float]:
    """The run-clock spans of the episodes that the windows of rounds out of line or whose
    steps rose show: rounds measured back to back (gaps under `EPISODE_GAP_S`) are one
    episode, from the first's start to the last's end (a lower bound: the cap may have
    started before and ended after)."""
    spans: list[float] = []
    ordered = sorted(windows)
    start = end = math.nan
    for window in ordered:
        if not math.isnan(end) and window[0] - end <= EPISODE_GAP_S:
            end = max(end, window[1])
            continue
        if not math.isnan(end):
            spans.append(end - start)
        start, end = window
    if not math.isnan(end):
        spans.append(end - start)
    return spans


@dataclass
class Remeasures:
    """One run's cells measured again: rises per cell, the cells checked against the others,
    and what was measured again and why (the manifest's `remeasured`)."""

    rises: dict[CellKey, int] = field(default_factory=dict)
    rechecked: dict[CellKey, int] = field(default_factory=dict)  # rechecks that count
    recheck_rounds: dict[CellKey, int] = field(default_factory=dict)  # all of them
    # The longest episode (clock cap) seen so far, seconds on the run clock.
    episode_s: float = 0.0
    # When each flagged cell's standing round ended, and why it is out of line.
    flagged_end: dict[CellKey, float] = field(default_factory=dict)
    reasons: dict[CellKey, str] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    # The run-clock windows of rounds whose steps rose (not recorded: measured again).
    rise_windows: list[tuple[float, float]] = field(default_factory=list)
    omitted: int = 0  # log entries beyond `MAX_LOG_ENTRIES`

    def ends_on_rise(self, kind: RoundKind, cell: SweepCell) -> bool:
        """Would a rise in this round be measured again (so the round may end on one)?"""
        return (
            kind in ("cell", "recheck", "anchor")
            and self.rises.get(cell.key, 0) < MAX_RISE_REMEASURES
        )

    def rose(
        self,
        kind: RoundKind,
        cell: SweepCell,
        measured: MeasuredRound,
        window: tuple[float, float] = (0.0, 0.0),
    ) -> bool:
        """Did the round's steps rise, so its cell is measured again instead of recording it?
        `window`: the round's on the run clock (a rise marks an episode there too)."""
        rise = measured.outcome.level_rise
        if rise is None or not self.ends_on_rise(kind, cell):
            return False
        self.rises[cell.key] = self.rises.get(cell.key, 0) + 1
        self.rise_windows.append(window)
        self._note(
            _entry(cell.key, f"its steps rose by {rise:.1%} mid-round (a clock cap setting in?)")
        )
        logger.warning(
            "Round bs=%d frac=%s: its step times rose by %.1f%% mid-round beyond KV growth "
            "(a clock cap setting in?); not averaged in, measured again (%d of %d).",
            cell.bs,
            cell.frac,
            rise * 100,
            self.rises[cell.key],
            MAX_RISE_REMEASURES,
        )
        return True

    def rechecks(self, rounds: Sequence[Mapping[str, Any]]) -> list[Job]:
        """Once the queue is empty: the cells out of line with the others (`out_of_line`)
        with rechecks left, the longest-standing first (the later ones give an episode over
        the last rounds time to end). Asked again after those rounds: a neighbour replaced may
        show the next one, and a cell whose round measured again did not replace it still
        stands out. An anchor is measured again as an anchor (it carries the ramp model)."""
        seen = round_levels(rounds)
        flagged = out_of_line(list(seen.levels.values()))
        windows = [seen.windows[k] for k in flagged if k in seen.windows]
        self.episode_s = max([self.episode_s, *episode_spans(windows + self.rise_windows)])
        due = [
            key
            for key in flagged
            if self.rechecked.get(key, 0) < MAX_RECHECKS
            and self.recheck_rounds.get(key, 0) < MAX_RECHECK_ROUNDS
        ]
        due.sort(key=lambda k: seen.windows.get(k, (0.0, 0.0))[1])
        for key in due:
            self.flagged_end[key] = seen.windows.get(key, (0.0, 0.0))[1]
            self.reasons[key] = flagged[key]
        if due:
            logger.warning(
                "%d rounds read out of line with the others (a clock cap over a whole round?); "
                "measuring them again: %s",
                len(due),
                "; ".join(f"bs={bs} frac={frac}: {flagged[(r, bs, frac)]}" for r, bs, frac in due),
            )
        return [("anchor" if key in seen.anchors else "recheck", SweepCell(*key)) for key in due]

    def left_out_of_line(self, rounds: Sequence[Mapping[str, Any]]) -> dict[CellKey, str]:
        """The cells still out of line (call when `rechecks` returned none: all are spent)."""
        return out_of_line(list(round_levels(rounds).levels.values()))

    def is_recheck(self, kind: RoundKind, cell: SweepCell) -> bool:
        return kind == "recheck" or (kind == "anchor" and cell.key in self.flagged_end)

    def starting(
        self, kind: RoundKind, cell: SweepCell, settings: RoundSettings, clock: float
    ) -> RoundSettings:
        """The settings of the round of `cell` starting at run-clock second `clock`. A
        recheck runs to `RECHECK_STEPS_FRACTION` of `--max-steady-steps`, and counts towards
        `MAX_RECHECKS` only if the longest episode seen, begun as the first round ended, is
        over by then."""
        if not self.is_recheck(kind, cell):
            return settings
        key = cell.key
        end = self.flagged_end.get(key, 0.0)
        late = clock >= end + self.episode_s
        self.recheck_rounds[key] = self.recheck_rounds.get(key, 0) + 1
        if late:
            self.rechecked[key] = self.rechecked.get(key, 0) + 1
        entry = _entry(key, self.reasons.get(key, "out of line"))
        entry |= {
            "after_s": round(clock - end, 3),
            "episode_s": round(self.episode_s, 3),
            "counted": late,
        }
        self._note(entry)
        steps = max(1, int(settings.max_steady_steps * RECHECK_STEPS_FRACTION))
        return replace(settings, max_steady_steps=steps)

    def _note(self, entry: dict[str, Any]) -> None:
        if len(self.log) < MAX_LOG_ENTRIES:
            self.log.append(entry)
        else:
            self.omitted += 1

    def manifest(self) -> dict[str, Any]:
        """What the manifest says about the cells measured again."""
        return {"remeasured": self.log, "remeasured_omitted": self.omitted}

    def concluded(self, cell: SweepCell, replaced: bool) -> None:
        """The outcome of the cell's last recheck: did it replace the round it checked?"""
        for entry in reversed(self.log):
            if (entry["repeat"], entry["bs"], entry["frac"]) == cell.key and "after_s" in entry:
                entry["replaced"] = replaced
                return


def _entry(key: CellKey, reason: str) -> dict[str, Any]:
    repeat, bs, frac = key
    return {"repeat": repeat, "bs": bs, "frac": frac, "reason": reason}
