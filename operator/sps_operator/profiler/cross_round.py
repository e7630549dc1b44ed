"""A round against its neighbours: the check that catches a round lying entirely inside a
clock cap (pure).

A throttle window (a power or thermal cap) slows every step inside it. A round that straddles
one shows a rise (`steady.level_rise`) and is measured again at once; a round shorter than
the cap that lies entirely inside it shows nothing: its steps are steady, only all slow
(20 % in the simulator's throttling column, 23 % off in a table). What does show is its level
against the rounds of the same sweep either side of it: step time is smooth in the batch's
tokens, and a cap only ever slows. So once the sweep is done, each round's step time is
compared with the lines through pairs of its nearest neighbours (by batch tokens, at the
same repeat and pin); one far above most of them is measured again, and the new round
replaces it only if it is faster beyond noise (`replaces`).
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
# The lines a round is judged against go through two of its this many nearest rounds.
NEAREST = 4
# The leave-one-out line a round is judged against is fitted through this many of its
# nearest rounds: local, so a knee or graph tiers bend it little.
FIT_NEAREST = 5
# How far a round may read slower than a round of more batch tokens (and at least as many
# requests, same repeat and pin), in standard errors of the difference, before it is
# measured again: step time cannot fall as the batch grows, so only noise (or a cap over
# the slower round) makes it. A false alarm costs a round.
NON_MONOTONE_Z = 2.5


@dataclass(frozen=True)
class Level:
    """One measured round as the check sees it."""

    key: tuple[int, int, float | None]  # (repeat, bs per rank, frac): the cell
    batch_tokens: int
    step_time: float  # seconds, at the reference context
    se: float  # its standard error


def _expected(point: Level, a: Level, b: Level) -> tuple[float, float]:
    """The step time the line through rounds `a` and `b` gives at `point`, and its standard
    error."""
    weight = (point.batch_tokens - a.batch_tokens) / (b.batch_tokens - a.batch_tokens)
    value = a.step_time + weight * (b.step_time - a.step_time)
    return value, math.hypot((1 - weight) * a.se, weight * b.se)


def _neighbour_pairs(point: Level, others: Sequence[Level]) -> list[tuple[Level, Level]]:
    """Pairs among the rounds nearest to `point` in batch tokens."""
    near = sorted(others, key=lambda o: abs(o.batch_tokens - point.batch_tokens))[:NEAREST]
    return [
        (a, b)
        for i, a in enumerate(near)
        for b in near[i + 1 :]
        if a.batch_tokens != b.batch_tokens
    ]


def slow_outliers(levels: Sequence[Level]) -> list[tuple[int, int, float | None]]:
    """The cells whose round reads far slower than most lines through two of its nearest
    neighbours (same repeat and pin), in the order given. Most, not one: a neighbour inside
    a cap itself (or fast by chance) bends the lines through it, and it is in fewer than half
    of them, so it can neither make a good round read slow nor excuse a capped one."""
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
        pairs = _neighbour_pairs(point, others)
        above = sum(_far_above(point, *_expected(point, a, b)) for a, b in pairs)
        if pairs and above > len(pairs) / 2:
            flagged.append(point.key)
    return flagged


def slower_than_larger(
    levels: Sequence[Level],
) -> dict[tuple[int, int, float | None], Level]:
    """The cells whose round reads slower, beyond noise, than a round of more batch tokens
    and at least as many requests (same repeat and pin), each with the fastest such round.
    Unlike the lines above, this needs no clean neighbour: several neighbouring rounds
    inside one cap are all slower than the first round of more tokens after the cap."""
    flagged: dict[tuple[int, int, float | None], Level] = {}
    for point in levels:
        repeat, bs, frac = point.key
        for other in levels:
            if (
                other.key[0] == repeat
                and other.key[2] == frac
                and other.key[1] >= bs
                and other.batch_tokens > point.batch_tokens
                and math.isfinite(other.se)
                and point.step_time - other.step_time
                > NON_MONOTONE_Z * math.hypot(point.se, other.se)
            ):
                best = flagged.get(point.key)
                if best is None or other.step_time < best.step_time:
                    flagged[point.key] = other
    return flagged


def above_local_fit(levels: Sequence[Level]) -> list[tuple[int, int, float | None]]:
    """The cells whose round reads far slower than the weighted least-squares line through
    its `FIT_NEAREST` nearest rounds (same repeat and pin; leave one out): the test for the
    ends of a sweep, where the lines through pairs extrapolate too far to see a cap (the
    largest cell has no round of more tokens for `slower_than_larger`). Same thresholds as
    the lines (`SLOW_Z`, `SLOW_MIN_REL`)."""
    flagged = []
    for point in levels:
        repeat, _bs, frac = point.key
        others = sorted(
            (
                o
                for o in levels
                if o.key != point.key
                and o.key[0] == repeat
                and o.key[2] == frac
                and o.step_time > 0
                and o.se > 0
                and math.isfinite(o.se)
            ),
            key=lambda o: abs(o.batch_tokens - point.batch_tokens),
        )[:FIT_NEAREST]
        fitted = _line_at(point.batch_tokens, others)
        if fitted is not None and _far_above(point, *fitted):
            flagged.append(point.key)
    return flagged


def _line_at(x: float, points: Sequence[Level]) -> tuple[float, float] | None:
    """The weighted least-squares line through `points` (step time against batch tokens,
    weights 1/se²) at `x`, and its standard error; None with fewer than 3 distinct x."""
    if len({p.batch_tokens for p in points}) < 3:
        return None
    weights = [1 / (p.se * p.se) for p in points]
    total = sum(weights)
    mean_x = sum(w * p.batch_tokens for w, p in zip(weights, points, strict=True)) / total
    mean_y = sum(w * p.step_time for w, p in zip(weights, points, strict=True)) / total
    sxx = sum(w * (p.batch_tokens - mean_x) ** 2 for w, p in zip(weights, points, strict=True))
    sxy = sum(
        w * (p.batch_tokens - mean_x) * (p.step_time - mean_y)
        for w, p in zip(weights, points, strict=True)
    )
    slope = sxy / sxx
    value = mean_y + slope * (x - mean_x)
    return value, math.sqrt(1 / total + (x - mean_x) ** 2 / sxx)


def _far_above(point: Level, expected: float, expected_se: float) -> bool:
    excess = point.step_time - expected
    return (
        expected > 0
        and excess > SLOW_Z * math.hypot(point.se, expected_se)
        and excess > SLOW_MIN_REL * expected
    )


def replaces(first: Level, again: Level) -> bool:
    """Does the round measured again replace the first? Only when it is faster beyond noise:
    a cap only slows, and two reads that agree say the level is real."""
    return first.step_time - again.step_time > FASTER_Z * math.hypot(first.se, again.se)
