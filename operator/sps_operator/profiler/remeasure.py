"""Which cells are measured again within a run, and how many times.

Two reasons (`docs/profiler.md`, "The stopping rule"): a round whose steps rose mid-round
(`steady.level_rise`: a clock cap set in) is measured again right away; and once the queue
is empty, a round far slower than its neighbours (`cross_round`: a cap over the whole
round) is measured again, up to twice.
"""

from __future__ import annotations

import logging

from sps_operator.profiler.active_round import MeasuredRound
from sps_operator.profiler.cross_round import Level, slow_outliers
from sps_operator.profiler.sweep import Job, RoundKind, SweepCell

logger = logging.getLogger(__name__)

# A cell whose round straddled a clock cap (its steps rose: `steady.level_rise`) is measured
# again up to this many times; the last round is kept whatever it shows (flagged by its CI
# and drift), so a GPU that is always capped still gets a table the gates can judge.
MAX_RISE_REMEASURES = 2
# A round far slower than its neighbours is measured again up to this many times: a round
# measured again can land inside a cap too (a cap over a whole short round recurs), and then
# it reads as slow as the first and still stands out.
MAX_RECHECKS = 2

CellKey = tuple[int, int, float | None]


class Remeasures:
    """One run's cells measured again: rises per cell, and the cells checked against their
    neighbours."""

    def __init__(self) -> None:
        self.rises: dict[CellKey, int] = {}
        self.rechecked: dict[CellKey, int] = {}

    def ends_on_rise(self, kind: RoundKind, cell: SweepCell) -> bool:
        """Would a rise in this round be measured again (so the round may end on one)?"""
        return kind in ("cell", "recheck") and self.rises.get(cell.key, 0) < MAX_RISE_REMEASURES

    def rose(self, kind: RoundKind, cell: SweepCell, measured: MeasuredRound) -> bool:
        """Did the round's steps rise, so its cell is measured again instead of recording it?"""
        rise = measured.outcome.level_rise
        if rise is None or not self.ends_on_rise(kind, cell):
            return False
        self.rises[cell.key] = self.rises.get(cell.key, 0) + 1
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

    def rechecks(self, levels: dict[CellKey, Level]) -> list[Job]:
        """Once the queue is empty: the cells far slower than their neighbours measured again
        fewer than `MAX_RECHECKS` times (`cross_round`). Asked again after those rounds: a
        neighbour replaced may show the next one (a cap often covers two short rounds in a
        row), and a cell whose round measured again did not replace it still stands out."""
        slow = [
            k
            for k in slow_outliers(list(levels.values()))
            if self.rechecked.get(k, 0) < MAX_RECHECKS
        ]
        for key in slow:
            self.rechecked[key] = self.rechecked.get(key, 0) + 1
        if slow:
            logger.warning(
                "%d rounds read far slower than their neighbours (a clock cap over a whole "
                "round?); measuring them again: %s",
                len(slow),
                ", ".join(f"bs={bs} frac={frac}" for _r, bs, frac in slow),
            )
        return [("recheck", SweepCell(*key)) for key in slow]
