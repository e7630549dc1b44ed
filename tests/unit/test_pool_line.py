"""The order of the line on a GPU pool (policies/borrow.py `observe_line`, `ahead_of`):
the admin's bound (maxPoolTurnSeconds) sends back only a head of line that was offered
the free pool and did not take it; a bid that waits while others hold the pool keeps its
place however long it waits (issue 33: a tenant alternating two profiles kept a victim
waiting forever when every long wait went after every younger bid)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from sps_operator.controller.policies.borrow import (
    MAX_LEFT_MARKS,
    PoolBid,
    PoolLine,
    ahead_of,
    observe_line,
)
from sps_operator.controller.process.memories import PoolLines

H100 = "H100"
BOUND = 600  # seconds
TICK = 60  # a waiting run's pass looks at the line this often (at most)
START = datetime(2026, 3, 1, 12, tzinfo=UTC)


def stamp(seconds: int) -> str:
    return (START + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def bid(uid: str, since: int, priority: int = 0) -> PoolBid:
    return PoolBid(f"ns/{uid}", uid, H100, priority, stamp(since))


def look(line: PoolLine, bids: list[PoolBid], free: bool, now: int) -> PoolLine:
    return observe_line(line, bids, free, stamp(now), stamp(now - BOUND))


def test_a_bid_waiting_while_the_pool_is_held_keeps_its_place() -> None:
    victim, line = bid("a", 0), PoolLine()
    for now in range(0, 10 * BOUND, TICK):  # someone holds the pool all along
        line = look(line, [victim], False, now)
    assert line == PoolLine()
    fresh = bid("b", 10 * BOUND - 5)
    line = look(line, [victim, fresh], True, 10 * BOUND)
    assert ahead_of(victim, [fresh], line.stalled) == []
    assert ahead_of(fresh, [victim], line.stalled) == [victim]


def test_a_head_that_lets_the_free_pool_go_unused_for_the_bound_goes_after_the_others() -> None:
    head, second = bid("h", 0, priority=1000), bid("s", 10)
    line = PoolLine()
    for now in range(0, BOUND, TICK):
        line = look(line, [head, second], True, now)
        assert line.offered == "h" and not line.stalled
    line = look(line, [head, second], True, BOUND)
    assert line.stalled == {"h": stamp(BOUND)}
    assert ahead_of(second, [head], line.stalled) == []
    # The next head is offered from its first look; the stalled one keeps its mark for a
    # bound after it leaves the line (back within it, it is still stalled), then its mark
    # is forgotten.
    line = look(line, [head, second], True, BOUND + TICK)
    assert (line.offered, line.offered_at) == ("s", stamp(BOUND + TICK))
    line = look(line, [second], True, BOUND + 2 * TICK)
    assert line.marks() == {} and line.left == {"h": stamp(BOUND + 2 * TICK)}
    back = look(line, [head, second], True, BOUND + 3 * TICK)
    assert ahead_of(second, [head], back.marks()) == [] and back.left == {}
    assert "h" in look(line, [second], False, 2 * BOUND + TICK).stalled
    gone = look(line, [second], False, 2 * BOUND + 2 * TICK)
    assert "h" not in gone.stalled and gone.left == {}


def test_stalled_bids_take_turns_in_the_order_they_stalled() -> None:
    a, b = bid("a", 0), bid("b", 5)
    stalled = {"a": stamp(100), "b": stamp(50)}
    assert ahead_of(a, [b], stalled) == [b]
    line = look(PoolLine(stalled=stalled), [a, b], True, 200)
    assert line.offered == "b"


def test_the_process_wide_lines_forget_a_line_with_nothing_in_it() -> None:
    lines = PoolLines()
    assert lines.look(H100, [bid("a", 0)], True, stamp(0), stamp(-BOUND)) == {}
    assert lines.look(H100, [bid("a", 0)], True, stamp(BOUND), stamp(0)) == {"a": stamp(BOUND)}
    assert lines.look(H100, [], True, stamp(BOUND + 1), stamp(1)) == {}
    assert lines._lines  # the mark of the bid that left, for a bound
    assert lines.look(H100, [], True, stamp(2 * BOUND + 1), stamp(BOUND + 1)) == {}
    assert not lines._lines


def test_the_marks_of_bids_that_left_are_bounded_however_many_leave_at_once() -> None:
    crowd = [bid(f"q{i}", i) for i in range(5000)]
    line = PoolLine(stalled={b.uid: stamp(0) for b in crowd})
    line = look(line, [bid("a", 0)], False, BOUND)
    assert len(line.stalled) == len(line.left) == MAX_LEFT_MARKS
    assert look(line, [], False, 2 * BOUND) == PoolLine()


# ----------------------------------------------------------------------------- the property


@settings(max_examples=200, deadline=None)
@given(
    visits=st.lists(
        st.tuples(st.integers(1, BOUND // TICK - 1), st.integers(1, BOUND // TICK - 1)),
        min_size=1,
        max_size=6,
    )
)
def test_a_stalled_bid_away_for_less_than_the_bound_is_still_stalled_when_it_is_back(
    visits: list[tuple[int, int]],
) -> None:
    """A head that let the free pool go unused for the bound goes after the others; then,
    any number of times, it leaves the line for fewer looks than a bound lasts (while
    someone holds the pool) and comes back with the same pending pod: it is never first
    again (the rule forgot a mark at the first look without the bid)."""
    q, a = bid("q", 0), bid("a", 10)
    line = look(PoolLine(), [q, a], True, 0)
    line = look(line, [q, a], True, BOUND)
    now = BOUND
    for away, back in visits:
        for _ in range(away):
            now += TICK
            line = look(line, [a], False, now)
        for _ in range(back):
            now += TICK
            line = look(line, [q, a], True, now)
            assert ahead_of(a, [q], line.stalled) == [], (now, line)
            assert ahead_of(q, [a], line.stalled) == [a]


@dataclass
class Runner:
    bid: PoolBid
    stalls: bool  # never takes the pool when offered (its pass does not run)
    hold: int  # seconds it holds the pool once it takes it


arrivals = st.lists(
    st.tuples(
        st.integers(0, 40),  # at which tick it arrives
        st.booleans(),  # it stalls
        st.integers(1, 3 * BOUND // TICK),  # ticks it holds the pool
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(early=arrivals, late=arrivals, victim_at=st.integers(0, 20))
def test_the_oldest_bid_that_does_not_stall_is_served_within_a_bounded_number_of_turns(
    early: list[tuple[int, bool, int]],
    late: list[tuple[int, bool, int]],
    victim_at: int,
) -> None:
    """Any sequence of bids at one priority (some stalling, some holding the pool for
    up to three bounds), arriving before and after a victim that takes its turn: the
    victim borrows after at most one turn per bid older than it, and within one bound per
    stalling bid older than it plus their holds."""
    victim = Runner(bid("victim", victim_at * TICK), stalls=False, hold=1)
    runners = [victim]
    for i, (at, stalls, hold) in enumerate(early + [(victim_at + a, s, h) for a, s, h in late]):
        runners.append(Runner(bid(f"r{i:02}", at * TICK), stalls, hold * TICK))
    older = [r for r in runners if r.bid.place < victim.bid.place]
    budget_ticks = victim_at + sum(r.hold // TICK + 1 for r in older if not r.stalls)
    budget_ticks += sum(BOUND // TICK + 1 for r in older if r.stalls) + 2
    line, held_until, turns = PoolLine(), -1, 0
    waiting: list[Runner] = []
    for tick in range(budget_ticks + 1):
        now = tick * TICK
        waiting += [r for r in runners if r.bid.since == stamp(now)]
        free = now >= held_until
        bids = [r.bid for r in waiting]
        line = look(line, bids, free, now)
        if not free or not waiting:
            continue
        head = next(r for r in waiting if not ahead_of(r.bid, bids, line.stalled))
        if head.stalls:
            continue
        if head is victim:
            assert turns <= len([r for r in older if not r.stalls])
            return
        turns += 1
        held_until = now + head.hold
        waiting.remove(head)
    raise AssertionError(f"the victim waited {budget_ticks} ticks after {turns} turns")
