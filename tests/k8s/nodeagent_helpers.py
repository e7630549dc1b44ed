"""Small helpers shared by the node agent's tests against the local control plane."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any


def wait_until(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Polls `check` until it returns something truthy, and returns that."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)


def get_json(kubectl: Callable[..., str], *args: str) -> dict[str, Any]:
    """`kubectl get ARGS -o json`, or {} when the object does not exist."""
    out = kubectl("get", *args, "-o", "json", check=False)
    return json.loads(out) if out.strip() else {}


def apply(kubectl: Callable[..., str], ns: str, obj: dict[str, Any]) -> None:
    kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj))
