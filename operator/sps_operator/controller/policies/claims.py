"""Where a clone can attach the target's PersistentVolumeClaims (pure, no I/O).

A clone copies the target's volumes, so it mounts the same claims as the server it
measures. A ReadWriteOnce claim attaches to one node at a time: on another node the
clone's pod would hang (a local volume's node affinity, or a CSI Multi-Attach error). So
the Job goes to a node where a ready pod of the target already mounts every such claim
(a required node affinity to that node, next to the GPU-product pin: the node must be of
the product the table is for). A ReadWriteOncePod claim admits one pod in the whole
cluster: the clone can never mount it while the server runs, and the run is refused
with what to change. ReadOnlyMany and ReadWriteMany claims go as they are.

A claim the operator's cache does not know (not seen yet) counts as ReadWriteOnce:
running next to the server is always possible for any access mode, only less free.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sps_operator.api.reasons import CLAIM_NODE_UNAVAILABLE, READ_WRITE_ONCE_POD_CLAIM
from sps_operator.controller.policies.job_policy import Refusal


class ClaimHolder(Protocol):
    """What a pod must say for `volume_pin` to know where it holds its claims
    (placement.PodInfo; a Protocol, so that placement, which keeps a pod's claims with this
    module's `pod_claims`, and this module do not import each other)."""

    @property
    def node(self) -> str | None: ...
    @property
    def ready(self) -> bool: ...
    @property
    def deleting(self) -> bool: ...
    @property
    def profiling(self) -> bool: ...
    @property
    def phase(self) -> str | None: ...
    @property
    def claims(self) -> tuple[str, ...]: ...


READ_WRITE_ONCE = "ReadWriteOnce"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
SHARED_MODES = frozenset({"ReadOnlyMany", "ReadWriteMany"})
ACCESS_MODES = frozenset({READ_WRITE_ONCE, READ_WRITE_ONCE_POD, *SHARED_MODES})
# What the claim and pod indexes keep is bounded: a pod may list any number of volumes.
MAX_CLAIMS = 32
MAX_NAME = 253

NODE_NAME_FIELD = "metadata.name"


@dataclass(frozen=True)
class ClaimInfo:
    """What the claim index keeps per PersistentVolumeClaim."""

    name: str
    access_modes: frozenset[str]

    @property
    def pod_exclusive(self) -> bool:
        return READ_WRITE_ONCE_POD in self.access_modes

    @property
    def shared(self) -> bool:
        """Attachable on many nodes at once (a clone elsewhere mounts it)."""
        return bool(self.access_modes & SHARED_MODES) and not self.pod_exclusive


def claim_info(name: str, spec: Mapping[str, Any], status: Mapping[str, Any]) -> ClaimInfo:
    """A claim as the index keeps it: the access modes of the bound volume (status) when
    bound, else those asked for (spec); only the modes Kubernetes defines."""
    modes = status.get("accessModes") or spec.get("accessModes")
    listed = modes if isinstance(modes, list) else []
    known = frozenset(str(m) for m in listed if isinstance(m, str) and m in ACCESS_MODES)
    return ClaimInfo(name=name[:MAX_NAME], access_modes=known)


def pod_claims(pod_spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The claims a pod spec mounts (persistentVolumeClaim volumes), sorted, bounded."""
    found: set[str] = set()
    volumes = pod_spec.get("volumes")
    for volume in volumes if isinstance(volumes, list) else []:
        if not isinstance(volume, Mapping):
            continue
        source = volume.get("persistentVolumeClaim")
        name = source.get("claimName") if isinstance(source, Mapping) else None
        if isinstance(name, str) and name:
            found.add(name[:MAX_NAME])
    return tuple(sorted(found)[:MAX_CLAIMS])


@dataclass(frozen=True)
class VolumePin:
    """Where the clone must run for its claims: a node (None: anywhere its pin allows)."""

    node: str | None = None
    claims: tuple[str, ...] = ()  # the ReadWriteOnce claims that pin it there

    def describe(self) -> str:
        claims = ", ".join(self.claims)
        return f"its ReadWriteOnce volume claim(s) {claims} pin it to node {self.node}"


def _holders(pods: Iterable[ClaimHolder], claim: str) -> set[str]:
    """Nodes where a ready, running pod (not a profiling one) mounts `claim`."""
    return {
        p.node
        for p in pods
        if p.node
        and p.ready
        and not p.deleting
        and not p.profiling
        and p.phase in (None, "Running")
        and claim in p.claims
    }


def volume_pin(
    pod_spec: Mapping[str, Any],
    claims: Mapping[str, ClaimInfo],
    pods: Sequence[ClaimHolder],
    node_labels: Mapping[str, Mapping[str, str]],
    gpu_label: str,
    gpu_product: str,
) -> VolumePin | Refusal:
    """Where a clone of `pod_spec` can attach its claims, or why it never can."""
    mounted = pod_claims(pod_spec)
    exclusive = [c for c in mounted if c in claims and claims[c].pod_exclusive]
    if exclusive:
        return Refusal(
            READ_WRITE_ONCE_POD_CLAIM,
            "volumes",
            f"the target mounts the ReadWriteOncePod claim(s) {', '.join(exclusive)}: only one "
            "pod in the cluster may mount such a claim, and the server already does, so the "
            "profiling clone can never start. Give the weights a claim the clone can share "
            "(ReadOnlyMany, or ReadWriteMany), or serve them from an image volume or an "
            "init container that downloads them",
        )
    pinning = tuple(c for c in mounted if c not in claims or not claims[c].shared)
    if not pinning:
        return VolumePin()
    nodes: set[str] | None = None
    for claim in pinning:
        held = _holders(pods, claim)
        nodes = held if nodes is None else nodes & held
    of_product = sorted(
        n for n in nodes or () if (node_labels.get(n) or {}).get(gpu_label) == gpu_product
    )
    if of_product:
        return VolumePin(node=of_product[0], claims=pinning)
    where = ", ".join(sorted(nodes or ())) or "no node"
    return Refusal(
        CLAIM_NODE_UNAVAILABLE,
        "volumes",
        f"the target mounts the ReadWriteOnce claim(s) {', '.join(pinning)}, which attach to "
        "one node at a time: the clone must run on a node where a ready pod of the target "
        f"mounts them, with {gpu_label}={gpu_product}; ready pods hold them on {where}. The "
        "run starts once such a pod is ready; to run the clone anywhere, make the claim "
        "ReadOnlyMany or ReadWriteMany",
    )


def pin_to_node(pod: dict[str, Any], node: str) -> None:
    """Require `node` in the pod's node affinity, AND-ed with every term the pod already
    has (required terms are OR-ed, so the node is added to each of them)."""
    affinity = pod.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    field = {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}
    terms = required.get("nodeSelectorTerms") or [{}]
    required["nodeSelectorTerms"] = [
        {**term, "matchFields": [*(term.get("matchFields") or []), field]} for term in terms
    ]
