"""tests/waiting.py: the back-off between checks, and what a wait returns or raises."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import waiting
from waiting import FIRST_PAUSE, pauses, wait_for


def test_pauses_start_short_and_grow_to_the_interval() -> None:
    assert list(itertools.islice(pauses(1.5), 7)) == pytest.approx(
        [0.2, 0.3, 0.45, 0.675, 1.0125, 1.5, 1.5]
    )
    assert list(itertools.islice(pauses(0.1), 2)) == [0.1, 0.1]  # a short interval is kept


@given(st.floats(min_value=0.01, max_value=30))
def test_pauses_never_exceed_the_interval_and_reach_it(interval: float) -> None:
    seen = list(itertools.islice(pauses(interval), 40))
    assert all(p <= interval for p in seen)
    assert seen[0] == min(FIRST_PAUSE, interval)
    assert seen == sorted(seen)
    assert seen[-1] == interval


class FakeClock:
    """time.monotonic and time.sleep of a test: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(waiting.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(waiting.time, "sleep", fake.sleep)
    return fake


def test_a_long_wait_checks_far_less_often_than_twice_a_second(clock: FakeClock) -> None:
    calls: list[float] = []

    def ready_after_60s() -> Any:
        calls.append(clock.now)
        return clock.now >= 60 and "ready"

    assert wait_for("x", ready_after_60s) == "ready"
    assert len(calls) < 70  # the old constant 0.5 s: 121 checks
    assert clock.now <= 61  # found within one interval of being true


def test_a_short_wait_stays_short(clock: FakeClock) -> None:
    assert wait_for("x", lambda: clock.now >= 0.4) is True
    assert clock.now == pytest.approx(0.5)  # 0.2 then 0.3: not one whole interval


def test_a_timeout_raises_with_the_last_value_and_sleeps_not_past_the_deadline(
    clock: FakeClock,
) -> None:
    with pytest.raises(AssertionError, match=r"timed out after 10s waiting for y; last: 0"):
        wait_for("y", lambda: 0, timeout=10)
    assert clock.now == pytest.approx(10)
