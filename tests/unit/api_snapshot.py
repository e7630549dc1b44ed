"""`ApiSnapshot`: a pass's world read with LISTs through `KubeApi` (what the unit tests'
`FakeKube` answers), where the operator reads its watch caches (`state.CachedWorld`): the
same rules of what is a profile's, on the objects as the API holds them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sps_operator.api import labels as L
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.controller.finalizer import mounted_config_maps
from sps_operator.controller.kube.builders import ProfileRef
from sps_operator.controller.kube.client import KubeApi, Obj
from sps_operator.controller.kube.envsources import read_env_config_maps
from sps_operator.controller.policies.borrow import PoolBid
from sps_operator.controller.policies.claims import ClaimInfo
from sps_operator.controller.policies.job_policy import service_info
from sps_operator.controller.policies.ownership import profile_summary
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.controller.steps.state import Snapshot, owned_by_name, stable_table_name


def selector_string(selector: Mapping[str, Any]) -> str:
    """The string form of a metav1.LabelSelector a LIST takes (this world reads by LIST)."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


def mounted(deployments: Iterable[Obj], names: Iterable[str | None]) -> frozenset[str]:
    every = set().union(*(mounted_config_maps(d) for d in deployments))
    return frozenset(n for n in names if n and n in every)


@dataclass(frozen=True)
class ApiSnapshot:
    """The world read with LISTs through `KubeApi` (what the unit tests' fake answers)."""

    kube: KubeApi
    pods: Sequence[PodInfo] = ()
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    claims: Mapping[str, ClaimInfo] = field(default_factory=dict)
    pool_bids: Sequence[PoolBid] = ()  # (the caches' view; a LIST of one namespace has none)

    def read(self, ref: ProfileRef, spec: SpsProfileSpec) -> Snapshot:
        ns, kube = ref.namespace, self.kube
        mine = f"{L.LABEL_PROFILE_UID}={ref.uid}"
        deployments = kube.list_deployments(ns, selector_string(spec.selector.to_k8s()))
        every = kube.list_deployments(ns, "")
        stable = stable_table_name(spec)
        config_maps = owned_by_name(kube.list_config_maps(ns, mine), ref)
        return Snapshot(
            deployments=sorted(deployments, key=lambda d: d["metadata"]["name"]),
            jobs=owned_by_name(kube.list_jobs(ns, mine), ref),
            config_maps=config_maps,
            stable=kube.get("ConfigMap", ns, stable) if stable else None,
            profiles=[profile_summary(b) for b in kube.list_profiles(ns)],
            pods=self.pods,
            node_labels=self.node_labels,
            pdbs=kube.list_pdbs(ns),
            hpas=kube.list_hpas(ns),
            borrowed=[d for d in every if borrowed(d)],
            mounted=mounted(every, [*config_maps, stable]),
            pod_selecting_deployments=every,
            services=[
                service_info(s["metadata"]["name"], s.get("spec") or {})
                for s in kube.list_services(ns)
            ],
            env_config_maps=read_env_config_maps(kube, ns, deployments),
            pool_bids=self.pool_bids,
            claims=self.claims,
        )


def borrowed(deployment: Obj) -> bool:
    return L.ANNOTATION_BORROWED in ((deployment.get("metadata") or {}).get("annotations") or {})
