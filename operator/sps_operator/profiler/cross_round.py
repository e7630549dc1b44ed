"""A round against its neighbours: the check that catches a round lying entirely inside a
clock cap (pure).

A throttle window (a power or thermal cap) slows every step inside it. A round that straddles
one shows a rise (`steady.level_rise`) and is measured again at once; a round shorter than
the cap that lies entirely inside it shows nothing: its steps are steady, only all slow
(20 % in the simulator's throttling column, 23 % off in a table). What does show is its level
against the rounds of the same sweep either side of it: step time is smooth in the batch's
tokens, and a cap only ever slows. So once the sweep is done, each round's step time is
compared with the line through its two nearest neighbours (by batch tokens, at the same
repeat and pin); one far above it is measured again, and the new round replaces it only if
it is faster beyond noise (`replaces`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# How far above its neighbours' line a round must read, in standard errors of the
# difference and relative to the line, to be measured again: a false alarm costs a round,
# a missed cap a cell a fifth off. The simulator's step time is linear in the tokens to
# 0.05 % between the sweep's batch sizes; a real GPU's graph tiers bend it by a few percent.
SLOW_Z = 3.0
SLOW_MIN_REL = 0.05
# A measurement again replaces the first only if it is faster by this many standard errors
# of the difference (noise alone must not pick the faster of two reads).
FASTER_Z = 2.0


@dataclass(frozen=True)
class Level:
    """One measured round as the check sees it."""

    key: tuple[int, int, float | None]  # (repeat, bs per rank, frac): the cell
    batch_tokens: int
    step_time: float  # seconds, at the reference context
    se: float  # its standard error


def _expected(point: Level, near: Sequence[Level]) -> tuple[float, float]:
    """The step time the line through `near` (two rounds) gives at `point`, and its
    standard error."""
    a, b = near
    weight = (point.batch_tokens - a.batch_tokens) / (b.batch_tokens - a.batch_tokens)
    value = a.step_time + weight * (b.step_time - a.step_time)
    return value, math.hypot((1 - weight) * a.se, weight * b.se)


def _nearest_pair(point: Level, others: Sequence[Level]) -> list[Level] | None:
    """The neighbours either side of `point` (by batch tokens), else the two nearest on its
    one side; None without two at distinct token counts."""
    below = [o for o in others if o.batch_tokens < point.batch_tokens]
    above = [o for o in others if o.batch_tokens > point.batch_tokens]
    below.sort(key=lambda o: o.batch_tokens, reverse=True)
    above.sort(key=lambda o: o.batch_tokens)
    if below and above:
        return [below[0], above[0]]
    side = below or above
    distinct = {o.batch_tokens: o for o in reversed(side)}
    ordered = sorted(distinct.values(), key=lambda o: abs(o.batch_tokens - point.batch_tokens))
    return ordered[:2] if len(ordered) >= 2 else None


def slow_outliers(levels: Sequence[Level]) -> list[tuple[int, int, float | None]]:
    """The cells whose round reads far slower than its neighbours' line (same repeat and
    pin), in the order given."""
    flagged = []
    for point in levels:
        repeat, _bs, frac = point.key
        others = [
            o
            for o in levels
            if o.key != point.key
            and o.key[0] == repeat
            and o.key[2] == frac
            and o.batch_tokens != point.batch_tokens
            and o.step_time > 0
            and math.isfinite(o.se)
        ]
        near = _nearest_pair(point, others)
        if near is None:
            continue
        expected, expected_se = _expected(point, near)
        excess = point.step_time - expected
        noise = math.hypot(point.se, expected_se)
        if expected > 0 and excess > SLOW_Z * noise and excess > SLOW_MIN_REL * expected:
            flagged.append(point.key)
    return flagged


def replaces(first: Level, again: Level) -> bool:
    """Does the round measured again replace the first? Only when it is faster beyond noise:
    a cap only slows, and two reads that agree say the level is real."""
    return first.step_time - again.step_time > FASTER_Z * math.hypot(first.se, again.se)
