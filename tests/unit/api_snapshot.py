"""`api_snapshot`: a pass's world read with LISTs through `KubeApi` (what the unit tests'
`FakeKube` answers), where the operator reads its watch caches (`indexes.world_for`): the
same `Snapshot`, to which the pass applies the same rules of what is a profile's
(`Snapshot.for_profile`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sps_operator.api import labels as L
from sps_operator.controller.finalizer import mounted_config_maps
from sps_operator.controller.kube.client import KubeApi, Obj
from sps_operator.controller.passes.state import Snapshot, by_name
from sps_operator.controller.policies.borrow import PoolBid
from sps_operator.controller.policies.claims import ClaimInfo
from sps_operator.controller.policies.job_policy import service_info
from sps_operator.controller.policies.ownership import profile_summary, stable_config_map
from sps_operator.controller.policies.placement import PodInfo


def mounted(deployments: Iterable[Obj], names: Iterable[str | None]) -> frozenset[str]:
    every = set().union(*(mounted_config_maps(d) for d in deployments))
    return frozenset(n for n in names if n and n in every)


def api_snapshot(
    kube: KubeApi,
    body: Mapping[str, Any],
    pods: Sequence[PodInfo] = (),
    node_labels: Mapping[str, Mapping[str, str]] | None = None,
    claims: Mapping[str, ClaimInfo] | None = None,
    pool_bids: Sequence[PoolBid] = (),  # (the caches' view; a LIST of one namespace has none)
) -> Snapshot:
    """The world of `body`'s pass read with LISTs through `KubeApi`."""
    meta = body.get("metadata") or {}
    ns = str(meta.get("namespace") or "")
    mine = f"{L.LABEL_PROFILE_UID}={meta.get('uid', '')}"
    every = kube.list_targets(ns, "")
    config_maps = by_name(kube.list_config_maps(ns, mine))
    return Snapshot(
        deployments=every,
        jobs=by_name(kube.list_jobs(ns, mine)),
        config_maps=config_maps,
        profiles=[profile_summary(b) for b in kube.list_profiles(ns)],
        pods=pods,
        node_labels=node_labels or {},
        pdbs=kube.list_pdbs(ns),
        hpas=kube.list_hpas(ns),
        borrowed=[d for d in every if borrowed(d)],  # (a lender of any kind)
        mounted=mounted(every, [*config_maps, stable_config_map(body.get("spec") or {})]),
        pod_selecting_deployments=every,
        services=[
            service_info(s["metadata"]["name"], s.get("spec") or {}) for s in kube.list_services(ns)
        ],
        pool_bids=pool_bids,
        claims=claims or {},
    )


def borrowed(deployment: Obj) -> bool:
    return L.ANNOTATION_BORROWED in ((deployment.get("metadata") or {}).get("annotations") or {})
