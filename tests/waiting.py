"""Waiting for a condition in tests that drive real processes (one helper for all)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 180.0, interval: float = 0.5
) -> Any:
    """Poll `check` until it returns something truthy; fail with the last value seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


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
