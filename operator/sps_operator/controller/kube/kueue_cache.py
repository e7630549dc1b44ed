"""What was last read of Kueue per suspended Job, shared by every pass (a thread-locked
cache; the reads are in `capacity/runs.py`, what they mean in `policies/kueue.py`)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime, timedelta

from sps_operator.controller.policies.kueue import KueueState

KUEUE_READ_SECONDS = 15.0  # a Job's Workload is read at most this often
CACHE_ENTRIES = 1024  # Jobs remembered; the oldest is forgotten first


class KueueCache:
    """What was last read per Job, for `KUEUE_READ_SECONDS`; at most `CACHE_ENTRIES`
    Jobs (shared by every pass of the operator; passes of one profile never overlap, and
    a lost race only costs one more read)."""

    def __init__(self, seconds: float = KUEUE_READ_SECONDS, entries: int = CACHE_ENTRIES):
        self._ttl = timedelta(seconds=seconds)
        self._entries = entries
        self._read: OrderedDict[tuple[str, str, str], tuple[datetime, KueueState]] = OrderedDict()
        # Passes (threads) read and write it, the LocalQueue watch (the event loop) forgets.
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str, str], now: datetime) -> KueueState | None:
        with self._lock:
            found = self._read.get(key)
        if found is None or not (found[0] <= now < found[0] + self._ttl):
            return None
        return found[1]

    def put(self, key: tuple[str, str, str], now: datetime, state: KueueState) -> None:
        with self._lock:
            self._read[key] = (now, state)
            self._read.move_to_end(key)
            while len(self._read) > self._entries:
                self._read.popitem(last=False)

    def forget_queue(self, namespace: str, queue: str) -> None:
        """A LocalQueue was created: what was read of it in `namespace` is stale."""
        with self._lock:
            for key in [k for k in self._read if k[0] == namespace and k[2] == queue]:
                del self._read[key]
