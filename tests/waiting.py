"""Waiting for a condition in tests that drive real processes (one helper for all)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

# The first pause between two checks, and how much each pause grows up to `interval`: a
# short wait stays short, a long one reads the API less often (a poll twice a second for
# minutes: issue 35).
FIRST_PAUSE = 0.2
PAUSE_GROWTH = 1.5


def pauses(interval: float) -> Iterator[float]:
    """The pauses between checks: FIRST_PAUSE growing by PAUSE_GROWTH to `interval` (never
    above it: a caller's short interval is kept)."""
    pause = min(FIRST_PAUSE, interval)
    while True:
        yield pause
        pause = min(interval, pause * PAUSE_GROWTH)


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 180.0, interval: float = 1.0
) -> Any:
    """Poll `check` until it returns something truthy; fail with the last value seen.
    Pauses grow from FIRST_PAUSE to `interval` (`pauses`)."""
    started = time.monotonic()
    deadline = started + timeout
    last: Any = None
    for pause in pauses(interval):
        if time.monotonic() >= deadline:
            break
        last = check()
        if last:
            _record(what, time.monotonic() - started, timed_out=False)
            return last
        time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
    _record(what, time.monotonic() - started, timed_out=True)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def _record(what: str, seconds: float, timed_out: bool) -> None:
    """With SPS_TEST_WAIT_LOG set (a file): one JSON line per wait, to see where the suite's
    time goes (`tests/wait-report.py` sums them per test; docs/dev-cluster.md)."""
    path = os.environ.get("SPS_TEST_WAIT_LOG")
    if not path:
        return
    line = {
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0],
        "what": what,
        "seconds": round(seconds, 2),
        "timed_out": timed_out,
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def wait_crd_established(
    kubectl: Callable[..., str], name: str = "spsprofiles.sps.dev", timeout: float = 60
) -> None:
    """Poll the CRD until it is served (`kubectl wait` errors out while its
    .status.conditions is still unset)."""

    def established() -> bool:
        crd = json.loads(kubectl("get", "crd", name, "-o", "json"))
        conds = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    wait_for(f"CRD {name} Established", established, timeout=timeout, interval=0.2)
