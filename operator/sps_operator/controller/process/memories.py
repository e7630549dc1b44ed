"""What the operator remembers between passes, process-wide and thread-safe (passes run in
a pool of threads): its own observations of time, which no tenant can write. The decisions
on them are pure and live in `policies` (`borrow.observe_line`, `stable_writers.rewrite_wait`);
these hold the state and the lock. In memory: a restart forgets them (docs/reliability.md says
what that costs)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import datetime

from sps_operator.controller.policies.borrow import PoolBid, PoolLine, observe_line
from sps_operator.controller.policies.stable_writers import (
    MAX_CONTESTS,
    Rewrite,
    after_write,
    again,
    rewrite_wait,
)


class PoolLines:
    """The `PoolLine` of every GPU product, process-wide (thread-safe: passes run in a
    pool of threads). In memory: what it records is the operator's own observation of
    time, which no tenant can write; an operator restart forgets it, which only gives a
    stalled head one more bound (it is offered again from the restart)."""

    def __init__(self) -> None:
        self._lines: dict[str, PoolLine] = {}
        self._lock = threading.Lock()

    def look(
        self, product: str, bids: Iterable[PoolBid], pool_free: bool, now: str,
        expired_before: str,
    ) -> Mapping[str, str]:  # fmt: skip
        """Observe the line on `product` now; returns its stalled bids (`ahead_of`)."""
        with self._lock:
            line = self._lines.get(product, PoolLine())
            line = observe_line(line, bids, pool_free, now, expired_before)
            if line == PoolLine():
                self._lines.pop(product, None)
            else:
                self._lines[product] = line
            return line.marks()


class Rewrites:
    """The `Rewrite` of every object the operator wrote, process-wide (thread-safe). A key
    names the object (e.g. ("holder", namespace, ConfigMap, Deployment UID))."""

    def __init__(self) -> None:
        # In the order of the last write to each key (oldest first), so that a full memory
        # forgets from the front in constant time: a scan of all 10,000 under the lock at
        # every new key cost 6 ms a write, which a tenant's churn would make everyone pay.
        self._last: OrderedDict[tuple[str, ...], Rewrite] = OrderedDict()
        self._lock = threading.Lock()

    def wait(self, key: tuple[str, ...], what: str, now: datetime) -> tuple[float, int]:
        """Seconds before `what` may be written into `key` again (0: now), and how many
        times in a row the operator wrote it so far (2 or more: something undoes it)."""
        with self._lock:
            last = self._last.get(key)
            if not again(last, what, now):
                return 0.0, 0
            assert last is not None
            return rewrite_wait(last, what, now), last.count

    def last_written(self, key: tuple[str, ...], now: datetime) -> str | None:
        """What the operator last wrote into `key`, if not long ago (None: nothing)."""
        with self._lock:
            last = self._last.get(key)
            return last.what if last is not None and again(last, last.what, now) else None

    def wrote(self, key: tuple[str, ...], what: str, now: datetime) -> int:
        """Record a write of `what` into `key` at `now`; returns how many in a row."""
        with self._lock:
            if len(self._last) >= MAX_CONTESTS and key not in self._last:
                # Forget what is quiet (the oldest, at the front), else the oldest: at worst
                # a key forgotten is written back once more. Each key is dropped once.
                while self._last:
                    first = next(iter(self._last.values()))
                    if len(self._last) < MAX_CONTESTS and again(first, first.what, now):
                        break
                    self._last.popitem(last=False)
            record = after_write(self._last.get(key), what, now)
            self._last[key] = record
            self._last.move_to_end(key)
            return record.count
