"""The kinds of workload a profile serves, and what the rollout asks of each (pure).

A target is a Deployment, a StatefulSet or a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1,
a multi-node group of pods that is one server). The rest of the operator asks this module,
never the fields of one kind: where the pod templates are (a LeaderWorkerSet has two, the
leader's optional, and every rank must load the same table bytes, so the table goes into
both), which pods are the workload's, when a rollout is complete, how many pods (or groups)
a roll may take down, how long it may take, and what holds it up.

Every object read here is untrusted input (a tenant wrote it): a missing or odd field
reads as its Kubernetes default or as "not rolled out", never raises.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sps_operator.api.kinds import WorkloadKind as KindName
from sps_operator.constants import GPU_RESOURCE

DEPLOYMENT = KindName.DEPLOYMENT.value
STATEFUL_SET = KindName.STATEFUL_SET.value
LEADER_WORKER_SET = KindName.LEADER_WORKER_SET.value
LWS_GROUP = "leaderworkerset.x-k8s.io"
# The label LWS puts on every pod of a LeaderWorkerSet (its name); LWS has no spec.selector.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"

# A path into the object, by field name.
Path = tuple[str, ...]


@dataclass(frozen=True)
class WorkloadKind:
    """One kind: its API coordinates and where its pod templates are (the first present
    one is the server's: a LeaderWorkerSet's leader, else its worker template)."""

    kind: str
    group: str
    version: str
    plural: str
    template_paths: tuple[Path, ...]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


KINDS: dict[str, WorkloadKind] = {
    DEPLOYMENT: WorkloadKind(DEPLOYMENT, "apps", "v1", "deployments", (("spec", "template"),)),
    STATEFUL_SET: WorkloadKind(STATEFUL_SET, "apps", "v1", "statefulsets", (("spec", "template"),)),
    LEADER_WORKER_SET: WorkloadKind(
        LEADER_WORKER_SET,
        LWS_GROUP,
        "v1",
        "leaderworkersets",
        (
            ("spec", "leaderWorkerTemplate", "leaderTemplate"),
            ("spec", "leaderWorkerTemplate", "workerTemplate"),
        ),
    ),
}
KIND_NAMES = tuple(KINDS)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    return default


def kind_of(obj: Mapping[str, Any]) -> WorkloadKind:
    """The object's kind (a Deployment when it says none or one the operator does not
    serve: objects reach here only from the watches of these three kinds)."""
    return KINDS.get(str(obj.get("kind") or ""), KINDS[DEPLOYMENT])


def _at(obj: Mapping[str, Any], path: Path) -> Any:
    node: Any = obj
    for key in path:
        node = _map(node).get(key)
    return node


def templates(obj: Mapping[str, Any]) -> list[tuple[Path, Mapping[str, Any]]]:
    """The pod templates present, with where each is; the server's first."""
    found = []
    for path in kind_of(obj).template_paths:
        template = _at(obj, path)
        if isinstance(template, Mapping):
            found.append((path, template))
    return found


def server_template(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The template of the pod that serves HTTP (a LeaderWorkerSet's leader; its worker
    template when it has no separate leader)."""
    found = templates(obj)
    return found[0][1] if found else {}


def pod_selector(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """What selects the workload's pods (None: none can be told). A LeaderWorkerSet
    labels every pod of every group with its name."""
    if kind_of(obj).kind == LEADER_WORKER_SET:
        name = _map(obj.get("metadata")).get("name")
        return {"matchLabels": {LWS_NAME_LABEL: str(name)}} if name else None
    selector = _map(obj.get("spec")).get("selector")
    return selector if isinstance(selector, Mapping) else None


def replicas(obj: Mapping[str, Any]) -> int:
    """Desired replicas (a LeaderWorkerSet's: groups)."""
    return max(_int(_map(obj.get("spec")).get("replicas"), 1), 0)


def ready_replicas(obj: Mapping[str, Any]) -> int:
    """Ready replicas (a LeaderWorkerSet's: groups whose every pod is ready, as LWS
    counts them in status.readyReplicas)."""
    return max(_int(_map(obj.get("status")).get("readyReplicas"), 0), 0)


def group_size(obj: Mapping[str, Any]) -> int:
    """Pods per replica: a LeaderWorkerSet's group size, 1 for the others."""
    if kind_of(obj).kind != LEADER_WORKER_SET:
        return 1
    lwt = _map(_map(obj.get("spec")).get("leaderWorkerTemplate"))
    return max(_int(lwt.get("size"), 1), 1)


def _observed(obj: Mapping[str, Any]) -> bool:
    meta, status = _map(obj.get("metadata")), _map(obj.get("status"))
    return _int(status.get("observedGeneration"), 0) >= _int(meta.get("generation"), 0)


def rolled_out(obj: Mapping[str, Any]) -> bool:
    """Like `kubectl rollout status`: the new template is observed and every replica
    runs it, ready (available, for a Deployment)."""
    kind = kind_of(obj).kind
    if not _observed(obj):
        return False
    status, want = _map(obj.get("status")), replicas(obj)
    if kind == DEPLOYMENT:
        return (
            _int(status.get("updatedReplicas"), 0) >= want
            and _int(status.get("availableReplicas"), 0) >= want
            and _int(status.get("replicas"), 0) <= want
        )
    if kind == STATEFUL_SET:
        current, update = status.get("currentRevision"), status.get("updateRevision")
        # The StatefulSet controller moves currentRevision on only under RollingUpdate; an
        # OnDelete one is rolled out once every pod is updated and ready.
        on_delete = _map(_map(obj.get("spec")).get("updateStrategy")).get("type") == "OnDelete"
        return (
            _int(status.get("updatedReplicas"), 0) >= want
            and _int(status.get("readyReplicas"), 0) >= want
            and _int(status.get("replicas"), 0) <= want
            and (on_delete or not update or current == update)
        )
    return (
        _int(status.get("updatedReplicas"), 0) >= want
        and _int(status.get("readyReplicas"), 0) >= want
        and _int(status.get("replicas"), 0) <= want
        and not any(
            _map(c).get("type") == "UpdateInProgress" and _map(c).get("status") == "True"
            for c in status.get("conditions") or []
            if isinstance(status.get("conditions"), list)
        )
    )


def _resolve(value: Any, total: int, round_up: bool, default: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        try:
            share = float(value[:-1]) / 100 * total
        except ValueError:
            return default
        if not math.isfinite(share):
            return default
        return math.ceil(share) if round_up else math.floor(share)
    return _int(value, default) if value is not None else default


def max_unavailable(obj: Mapping[str, Any], count: int) -> int | None:
    """Replicas (groups, for a LeaderWorkerSet) a roll of `count` may take down before
    their replacements are ready; None when it takes all of them down at once
    (a Deployment's Recreate)."""
    kind = kind_of(obj).kind
    spec = _map(obj.get("spec"))
    if kind == DEPLOYMENT:
        strategy = _map(spec.get("strategy"))
        if strategy.get("type") == "Recreate":
            return None
        rolling = _map(strategy.get("rollingUpdate"))
        surge = _resolve(rolling.get("maxSurge", "25%"), count, True, 0)
        unavailable = _resolve(rolling.get("maxUnavailable", "25%"), count, False, 0)
        # The Deployment controller's own rule: it must be able to progress.
        return 1 if surge <= 0 and unavailable <= 0 else max(unavailable, 0)
    if kind == STATEFUL_SET:
        # OrderedReady or Parallel, one pod at a time unless maxUnavailable says more.
        rolling = _map(_map(spec.get("updateStrategy")).get("rollingUpdate"))
        return max(_resolve(rolling.get("maxUnavailable"), count, False, 1), 1)
    rolling = _map(_map(spec.get("rolloutStrategy")).get("rollingUpdateConfiguration"))
    surge = _resolve(rolling.get("maxSurge"), count, True, 0)
    unavailable = _resolve(rolling.get("maxUnavailable"), count, False, 1)
    return 1 if surge <= 0 and unavailable <= 0 else max(unavailable, 0)


def progress_deadline_seconds(obj: Mapping[str, Any], admin_seconds: float) -> float:
    """How long a roll may take before it counts as failed: a Deployment's own
    progressDeadlineSeconds; the kinds that have none, the admin's bound."""
    if kind_of(obj).kind == DEPLOYMENT:
        return float(max(_int(_map(obj.get("spec")).get("progressDeadlineSeconds"), 600), 0))
    return max(float(admin_seconds), 0.0)


def deadline_exceeded(obj: Mapping[str, Any]) -> bool:
    """The workload's own controller says its roll failed (a Deployment's
    ProgressDeadlineExceeded; the other kinds never say it: their bound is the admin's)."""
    if kind_of(obj).kind != DEPLOYMENT or not _observed(obj):
        return False
    conditions = _map(obj.get("status")).get("conditions")
    return any(
        _map(c).get("type") == "Progressing"
        and _map(c).get("status") == "False"
        and _map(c).get("reason") == "ProgressDeadlineExceeded"
        for c in (conditions if isinstance(conditions, list) else [])
    )


def roll_waits(obj: Mapping[str, Any]) -> str | None:
    """What in the workload's own update strategy keeps a new template off some of its
    pods until a person acts (None: nothing; the roll proceeds by itself)."""
    kind = kind_of(obj).kind
    spec = _map(obj.get("spec"))
    if kind == STATEFUL_SET:
        strategy = _map(spec.get("updateStrategy"))
        if strategy.get("type") == "OnDelete":
            return (
                "the StatefulSet's updateStrategy is OnDelete: its pods take the new template "
                "only when deleted; the roll waits for you to delete them (kubectl delete pod)"
            )
        partition = _int(_map(strategy.get("rollingUpdate")).get("partition"), 0)
        if partition > 0:
            return (
                f"the StatefulSet's rollingUpdate.partition is {partition}: pods with an "
                f"ordinal below {partition} keep the old template until you lower it"
            )
    if kind == LEADER_WORKER_SET:
        strategy = _map(spec.get("rolloutStrategy"))
        rolling = _map(strategy.get("rollingUpdateConfiguration"))
        partition = _int(rolling.get("partition"), 0)
        if partition > 0:
            return (
                f"the LeaderWorkerSet's rollingUpdateConfiguration.partition is {partition}: "
                f"groups with an index below {partition} keep the old template until you "
                "lower it"
            )
    return None


def controller_failure(obj: Mapping[str, Any]) -> str | None:
    """The workload controller's own words that it cannot create pods (None: none)."""
    conditions = _map(obj.get("status")).get("conditions")
    for c in conditions if isinstance(conditions, list) else []:
        c = _map(c)
        if c.get("type") == "ReplicaFailure" and c.get("status") == "True":
            return f"the ReplicaSet cannot create pods: {c.get('message') or c.get('reason')}"
    return None


def container_gpus(container: Mapping[str, Any]) -> int:
    """GPUs a container asks for (its limit; a request alone must equal one), 0 if unreadable."""
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):  # GPUs are limits; a request alone must equal one
        value = (resources.get(part) or {}).get(GPU_RESOURCE)
        try:
            count = int(str(value))
        except ValueError:
            continue
        if 0 <= count <= 1024:
            return count
    return 0
