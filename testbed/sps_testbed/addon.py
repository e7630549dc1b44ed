"""What installing a controller into the bed from its shipped manifests and uninstalling
it need, whichever it is (sps_testbed.kueue, sps_testbed.lws): the bed's kubectl, polling
with a message that says what was seen, reading objects and their conditions."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

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


WEBHOOK_CALLERS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def uninstall(
    bed: Bed,
    manifest: Path,
    namespace: str,
    *,
    title: str,
    callers: Sequence[str] = WEBHOOK_CALLERS,
    left_kinds: Sequence[str],
    own: Callable[[str], bool],
    error: type[Exception],
    timeout: float = 180.0,
) -> None:
    """Remove an add-on installed from `manifest` and everything of it, leaving the bed as
    if it never ran; `error` naming what of it is left (`kubectl get KIND -o name` of
    `left_kinds`, the names `own` says are the add-on's: test namespaces may carry its name).

    Order matters: first what makes the API server call the add-on (`callers`: webhooks,
    an aggregated API), then the manager's namespace; then the finalizers left on its
    objects (nothing is left to remove them), then the rest, CRDs last so their objects go
    with them.
    """
    docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    front = [d for d in docs if d.get("kind") in callers]
    bed.kubectl("delete", "--ignore-not-found", "-f", "-", input=dump(front), timeout=timeout)
    bed.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false")
    # Nothing is left for the manager to finish: it need not take its grace period (the
    # namespace is Terminating, so no new pod replaces it).
    bed.kubectl(
        "delete", "pods", "-n", namespace, "--all", "--grace-period=1", "--wait=false",
        check=False,
    )  # fmt: skip
    bed.kubectl(
        "wait", "--for=delete", f"namespace/{namespace}", f"--timeout={timeout:.0f}s",
        check=False, timeout=timeout + 10,
    )  # fmt: skip
    for crd in (d for d in docs if d.get("kind") == "CustomResourceDefinition"):
        resource = crd["metadata"]["name"]
        for item in get_json(bed, resource, "-A").get("items") or []:
            meta = item.get("metadata") or {}
            if not meta.get("finalizers"):
                continue
            where = ["-n", meta["namespace"]] if meta.get("namespace") else []
            bed.kubectl(
                "patch", resource, meta["name"], *where, "--type=merge",
                "-p", '{"metadata":{"finalizers":null}}', check=False,
            )  # fmt: skip
    rest = [d for d in docs if d.get("kind") not in (*callers, "Namespace")]
    bed.kubectl(
        "delete", "--ignore-not-found", f"--timeout={timeout:.0f}s", "-f", "-",
        input=dump(rest), timeout=timeout + 10,
    )  # fmt: skip
    left = [
        name
        for kind in left_kinds
        for name in bed.kubectl("get", kind, "-o", "name").split()
        if own(name)
    ]
    if left:
        raise error(f"{title} uninstalled, but these are left: {', '.join(left)}")
