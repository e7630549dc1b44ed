"""What installing a controller into the bed from its shipped manifests needs, whichever
it is (sps_testbed.kueue, sps_testbed.lws): the bed's kubectl, polling with a message
that says what was seen, reading objects and their conditions."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

FIELD_MANAGER = "sps-testbed"
# Errors while a controller's webhooks are not serving yet: no endpoints, no caBundle,
# CRDs not established.
NOT_YET = ("failed calling webhook", "no matches for kind", "ensure CRDs are installed")


class Bed(Protocol):
    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> str: ...


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    """The status condition of type `kind` ({} when absent)."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


def dump(docs: Sequence[dict[str, Any]]) -> str:
    return "\n---\n".join(json.dumps(d) for d in docs)


def poll(
    what: str,
    check: Callable[[], Any],
    timeout: float,
    detail: Callable[[], str],
    error: type[Exception],
) -> Any:
    """`check()`'s first truthy value; `error` with `what` and `detail()` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"{what}: not within {timeout:.0f}s\n{detail()}")
        time.sleep(0.5)


def get_json(bed: Bed, *args: str) -> dict[str, Any]:
    """`kubectl get ARGS -o json` ({} when it is not there)."""
    out = bed.kubectl("get", *args, "-o", "json", check=False)
    return dict(json.loads(out)) if out.strip() else {}


def deployment_available(bed: Bed, namespace: str, name: str) -> bool:
    dep = get_json(bed, "deployment", name, "-n", namespace)
    return int((dep.get("status") or {}).get("availableReplicas") or 0) >= 1


def manager_state(bed: Bed, namespace: str, deployment: str) -> str:
    """The pods of `namespace` and the tail of the manager's log, for an error message."""
    pods = bed.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False)
    logs = bed.kubectl(
        "logs", "-n", namespace, f"deployment/{deployment}", "--tail=30", check=False
    )
    return f"--- pods in {namespace} ---\n{pods}\n--- manager log (tail) ---\n{logs}"
