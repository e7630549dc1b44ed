"""The profiling clone of a multi-node server (pure): a target whose command line says
`--nnodes N` with N > 1 is cloned as a group of N pods, one Indexed Job.

Why an Indexed Job and not a one-group LeaderWorkerSet: it needs nothing the cluster may
lack (LWS is an add-on), Kueue admits it as one Workload (its pod set counts N pods, so
the group is admitted and given back at once), its pods end (a LeaderWorkerSet's never
do) and the run's Job stays the one object the operator follows. The group's shape:

- `completionMode: Indexed`, `parallelism = completions = N`; rank = the pod's completion
  index; a headless Service (`publishNotReadyAddresses`) names pod 0 for the others
  (`<job>-0.<service>.<namespace>`), as JobSet does. The Job owns it, so the garbage
  collector deletes it with the Job however the Job goes, the operator up or not;
- every rank runs the same server: the target's command with every cost input unchanged,
  only the per-pod flags (`--node-rank`, `--dist-init-addr`) rewritten to the Job's own,
  and the variables a LeaderWorkerSet injects (`LWS_LEADER_ADDRESS`, `LWS_WORKER_INDEX`,
  `LWS_GROUP_SIZE`) set to the clone's values for a command that uses them elsewhere;
- one pod template for all ranks (an Indexed Job has one): the profiler container runs on
  rank 0 and holds the pod on the others (`sps-profiler run --node-rank`), so that a
  worker pod ends only when the Job ends it;
- `successPolicy` `succeededIndexes: "0"`: the Job succeeds when the leader's profiler
  does, and Kubernetes ends the workers; `backoffLimitPerIndex: 0` with
  `maxFailedIndexes: 0`: a lost rank (evicted, deleted, its node gone) fails the Job at
  once, and the Job's status names the index (`failedIndexes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sps_operator.controller.sglang.flags import without_flags
from sps_operator.controller.sglang.serverconfig import (
    ServerCommand,
    ServerProblem,
    resolve_flag,
)

NNODES_FLAG = "--nnodes"
NODE_RANK_FLAG = "--node-rank"
DIST_INIT_FLAG = "--dist-init-addr"
# Per-pod flags: where a rank is, never what a step costs (api/fingerprint.py says so too).
PER_POD_FLAGS = frozenset({NODE_RANK_FLAG, DIST_INIT_FLAG})
# The port rank 0 listens on for the group when the target's own cannot be read.
DEFAULT_DIST_PORT = 5000
RANK_ENV = "SPS_GROUP_RANK"
# An Indexed Job's pod carries its index under this key, as an annotation and a label.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_LABEL = COMPLETION_INDEX_ANNOTATION
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
# What LeaderWorkerSet's pod webhook injects (a target written for LWS uses them).
LWS_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
LWS_WORKER_INDEX = "LWS_WORKER_INDEX"
LWS_GROUP_SIZE = "LWS_GROUP_SIZE"
KUEUE_MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
GROUP_ENV_NAMES = frozenset({RANK_ENV, LWS_LEADER_ADDRESS, LWS_WORKER_INDEX, LWS_GROUP_SIZE})


@dataclass(frozen=True)
class Group:
    """A multi-node server's group, as its command line says it."""

    nnodes: int
    dist_port: int


def group_of(server: ServerCommand | None) -> Group | None:
    """The group of a server command (None: one node). ServerProblem when `--nnodes` is a
    value the operator cannot read (a `$(VAR)` it cannot resolve): ValueError, the clone
    could not have the target's group size."""
    if server is None:
        return None
    nnodes = next((f for f in reversed(server.flags) if f.flag == NNODES_FLAG), None)
    if nnodes is None:
        return None
    text = nnodes.value_text.strip()
    if not text.isdigit() or len(text) > 6:
        raise ValueError(
            f"--nnodes is {text[:60]!r}, not a number the operator can read: the profiling "
            "clone must have the server's group size; write it as a number in the command "
            "line (or in a variable of the container's env)",
        )
    if int(text) <= 1:
        return None
    dist = next((f for f in reversed(server.flags) if f.flag == DIST_INIT_FLAG), None)
    return Group(int(text), _port(dist.value_text if dist else ""))


def _port(address: str) -> int:
    """The port of `HOST:PORT` when it reads as one, else the default."""
    _, sep, port = address.rpartition(":")
    if sep and port.isdigit() and 0 < int(port) < 65536:
        return int(port)
    return DEFAULT_DIST_PORT


def leader_host(job: str, service: str, namespace: str) -> str:
    """Rank 0's DNS name: an Indexed Job's pod `<job>-0` in the headless Service's
    subdomain (LeaderWorkerSet names its leader the same way)."""
    return f"{job}-0.{service}.{namespace}"


def without_per_pod_flags(args: Sequence[str]) -> list[str]:
    """`args` without `--node-rank` and `--dist-init-addr` and their values, however
    written (`=value`, an alias, an abbreviation SGLang's parser accepts)."""
    return without_flags(args, _per_pod)


def _per_pod(name: str) -> bool:
    try:
        return name.startswith("--") and resolve_flag(name) in PER_POD_FLAGS
    except ServerProblem:
        return False


def group_args(args: Sequence[str], group: Group, leader: str) -> list[str]:
    """The clone's server flags for every rank: the target's, with the per-pod flags the
    Job's own (the rank from the pod's completion index)."""
    return [
        *without_per_pod_flags(args),
        NODE_RANK_FLAG,
        f"$({RANK_ENV})",
        DIST_INIT_FLAG,
        f"{leader}:{group.dist_port}",
    ]


def rank_env() -> dict[str, Any]:
    """The pod's rank: its completion index (an annotation every Indexed Job pod has)."""
    path = f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
    return {"name": RANK_ENV, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def group_env(env: Sequence[Mapping[str, Any]], group: Group, leader: str) -> list[dict[str, Any]]:
    """`env` with the group's variables first (a variable of the target's that uses one
    comes after it, as `$(VAR)` needs); the target's own spellings of them go."""
    own = [
        rank_env(),
        {"name": LWS_LEADER_ADDRESS, "value": leader},
        {"name": LWS_WORKER_INDEX, "value": f"$({RANK_ENV})"},
        {"name": LWS_GROUP_SIZE, "value": str(group.nnodes)},
    ]
    return own + [dict(e) for e in env if e.get("name") not in GROUP_ENV_NAMES]


def job_spec_fields(group: Group) -> dict[str, Any]:
    """The Job spec fields that make the Job a group (see the module's docstring)."""
    return {
        "completionMode": "Indexed",
        "completions": group.nnodes,
        "parallelism": group.nnodes,
        "backoffLimitPerIndex": 0,
        "maxFailedIndexes": 0,
        "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
    }


def drop_partial_admission(job_meta: dict[str, Any]) -> None:
    """No partial admission by Kueue (an annotation the admin's job defaults could carry):
    a group admitted with fewer ranks would never form."""
    annotations = job_meta.get("annotations")
    if annotations:
        annotations.pop(KUEUE_MIN_PARALLELISM, None)


def job_owner_reference(job: str, uid: str) -> dict[str, Any]:
    """The group's Job as the controller owner of its Service. No blockOwnerDeletion: with
    the OwnerReferencesPermissionEnforcement admission plugin it would need update on
    jobs/finalizers; background deletion needs none."""
    return {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": uid, "controller": True}


def owned_by_job(obj: Mapping[str, Any], job: str) -> str | None:
    """The UID of the Job named `job` that is `obj`'s controller owner (None: none is)."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    for ref in refs if isinstance(refs, list) else []:
        if (
            isinstance(ref, Mapping)
            and ref.get("controller") is True
            and (ref.get("kind"), ref.get("name")) == ("Job", job)
        ):
            return str(ref.get("uid") or "") or None
    return None


def headless_service(meta: Mapping[str, Any], job: str) -> dict[str, Any]:
    """The group's headless Service: DNS names for the Job's pods, ready or not (a rank
    joins before any serves), and no ports, no traffic."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": dict(meta),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {JOB_NAME_LABEL: job},
        },
    }
