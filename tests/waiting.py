"""Waiting for a condition in tests that drive real processes (one helper for all)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 180.0, interval: float = 0.5
) -> Any:
    """Poll `check` until it returns something truthy; fail with the last value seen."""
    started = time.monotonic()
    deadline = started + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            _record(what, time.monotonic() - started, timed_out=False)
            return last
        time.sleep(interval)
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
