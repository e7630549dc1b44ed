"""A client-side rate limit for the API server (a token bucket, thread-safe): a storm of
events across thousands of profiles must not swamp the API server, as client-go's QPS
and burst settings prevent for Go controllers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """`qps` tokens a second, at most `burst` saved up; `take` blocks until one is free."""

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be > 0 and burst >= 1")
        self.qps, self.burst = qps, burst
        self._clock, self._sleep = clock, sleep
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = threading.Lock()

    def take(self) -> float:
        """Take one token; returns the seconds waited for it."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.qps)
            self._stamp = now
            self._tokens -= 1.0
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait


class Periodic:
    """Work that many passes may ask for and one should do, at most once per `interval`
    seconds process-wide (thread-safe): e.g. the sweep for orphaned borrows."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._last: float | None = None
        self._lock = threading.Lock()

    def due(self) -> bool:
        """True for the first caller once `interval` has passed since the last True."""
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last < self.interval:
                return False
            self._last = now
            return True
