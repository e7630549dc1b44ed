"""The operator's write-backs of what another writer undoes (policies/stable_writers.py
`Rewrites`): the same content written again into one object waits twice as long each
time, capped; a different content, or a long quiet, starts afresh."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from sps_operator.controller.policies.stable_writers import (
    MAX_REWRITE_SECONDS,
    QUIET_SECONDS,
    REWRITE_SECONDS,
)
from sps_operator.controller.process.memories import Rewrites

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
KEY = ("holder", "ns", "table", "uid")


def test_the_same_content_written_again_waits_twice_as_long_each_time_capped() -> None:
    rewrites, now = Rewrites(), T0
    assert rewrites.wait(KEY, "hold", now) == (0.0, 0)
    waits = []
    for count in range(1, 10):
        assert rewrites.wrote(KEY, "hold", now) == count
        wait, seen = rewrites.wait(KEY, "hold", now)
        assert seen == count
        waits.append(wait)
        now += timedelta(seconds=wait)
        assert rewrites.wait(KEY, "hold", now)[0] == 0.0
    assert waits[:3] == [REWRITE_SECONDS, 2 * REWRITE_SECONDS, 4 * REWRITE_SECONDS]
    assert max(waits) == waits[-1] == MAX_REWRITE_SECONDS


def test_other_content_or_a_long_quiet_starts_afresh() -> None:
    rewrites = Rewrites()
    rewrites.wrote(KEY, "hold", T0)
    rewrites.wrote(KEY, "hold", T0 + timedelta(seconds=60))
    assert rewrites.wait(KEY, "release", T0 + timedelta(seconds=61)) == (0.0, 0)
    assert rewrites.wrote(KEY, "release", T0 + timedelta(seconds=61)) == 1
    assert rewrites.last_written(KEY, T0 + timedelta(seconds=62)) == "release"
    later = T0 + timedelta(seconds=61 + QUIET_SECONDS)
    assert rewrites.wait(KEY, "release", later) == (0.0, 0)
    assert rewrites.last_written(KEY, later) is None
    assert rewrites.wrote(KEY, "release", later) == 1
    # A clock that went back is not held against the write.
    assert rewrites.wait(KEY, "release", later - timedelta(seconds=30)) == (0.0, 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4 * 3600), min_size=1, max_size=60))
def test_writes_of_one_content_are_never_closer_than_the_backoff_allows(gaps: list[int]) -> None:
    """Whenever passes come (any gaps), a writer that follows `wait` writes one content at
    most once per minute, and at most 7 times in any hour (1, 2, 4, ... 32 min apart)."""
    rewrites, now, written = Rewrites(), T0, [T0]
    rewrites.wrote(KEY, "hold", now)
    for gap in gaps:
        now += timedelta(seconds=gap)
        if rewrites.wait(KEY, "hold", now)[0] == 0:
            rewrites.wrote(KEY, "hold", now)
            written.append(now)
    assert all((b - a).total_seconds() >= REWRITE_SECONDS for a, b in pairwise(written))
    for start in written:
        window = [w for w in written if start <= w < start + timedelta(hours=1)]
        assert len(window) <= 7


def test_the_memory_is_bounded_and_forgets_quiet_objects_first() -> None:
    from sps_operator.controller.policies import stable_writers

    rewrites = Rewrites()
    old = T0 - timedelta(seconds=QUIET_SECONDS + 1)
    for i in range(stable_writers.MAX_CONTESTS - 1):
        rewrites.wrote(("holder", str(i)), "hold", old)
    rewrites.wrote(KEY, "hold", T0)
    rewrites.wrote(("new",), "hold", T0)  # full: the quiet ones go, the contested one stays
    assert rewrites.wait(KEY, "hold", T0) == (REWRITE_SECONDS, 1)
    assert len(rewrites._last) == 2


def test_a_full_memory_of_contested_objects_forgets_the_least_recently_written() -> None:
    """Past the bound with nothing quiet, a new key pushes out the key written longest ago
    (in write order, kept without a scan: bench/rewrite_memory.py), and a key written again
    moves to the back."""
    from sps_operator.controller.policies import stable_writers

    rewrites = Rewrites()
    for i in range(stable_writers.MAX_CONTESTS):
        rewrites.wrote(("holder", str(i)), "hold", T0)
    rewrites.wrote(("holder", "0"), "hold", T0)  # written again: now the most recent
    rewrites.wrote(("new",), "hold", T0)
    assert rewrites.wait(("holder", "0"), "hold", T0)[1] == 2
    assert rewrites.wait(("holder", "1"), "hold", T0) == (0.0, 0)  # forgotten
    assert len(rewrites._last) == stable_writers.MAX_CONTESTS
