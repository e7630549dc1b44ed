"""What the operator's caches (kopf indexes) keep, under which keys, and what one
profile's pass takes from them (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sps_operator.api import labels as L
from sps_operator.controller.kube import KubeApi
from sps_operator.controller.ownership import profile_summary
from sps_operator.controller.placement import pod_info
from sps_operator.controller.state import CachedWorld

Index = Mapping[Any, Iterable[Any]]


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """An object as a pass needs it: without managedFields (the bulk of most objects),
    except the entries that own spec.replicas (BorrowReplica must know who scales it)."""
    meta = dict(body.get("metadata") or {})
    meta["managedFields"] = [
        {"manager": m.get("manager"), "operation": m.get("operation"),
         "fieldsV1": {"f:spec": {"f:replicas": {}}}}
        for m in meta.get("managedFields") or []
        if "f:replicas" in ((m.get("fieldsV1") or {}).get("f:spec") or {})
    ]  # fmt: skip
    return {**dict(body), "metadata": meta}


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def _labels(body: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(body).get("labels") or {}


def deployment_entries(body: Mapping[str, Any]) -> dict[Any, Any]:
    return {_meta(body).get("namespace") or "": slim(body)}


def job_entries(body: Mapping[str, Any]) -> dict[Any, Any]:
    return {_labels(body).get(L.LABEL_PROFILE_UID, ""): slim(body)}


def config_map_entries(body: Mapping[str, Any]) -> dict[Any, Any]:
    # A profile's own by its UID; the stable ones (AnnotateOnly) by namespace.
    key = _labels(body).get(L.LABEL_PROFILE_UID) or _meta(body).get("namespace") or ""
    return {key: slim(body)}


def profile_entries(body: Mapping[str, Any]) -> dict[Any, Any]:
    return {_meta(body).get("namespace") or "": profile_summary(body)}


def pod_entries(body: Mapping[str, Any]) -> dict[Any, Any]:
    meta = _meta(body)
    info = pod_info(
        str(meta.get("name", "")),
        meta.get("labels") or {},
        body.get("spec") or {},
        body.get("status") or {},
        meta,
    )
    return {meta.get("namespace") or "": info}


def node_entries(body: Mapping[str, Any]) -> dict[Any, Any]:
    return {_meta(body).get("name"): dict(_labels(body))}


def namespaced_entries(body: Mapping[str, Any]) -> dict[Any, Any]:
    """PodDisruptionBudgets and HorizontalPodAutoscalers: by namespace."""
    return {_meta(body).get("namespace") or "": slim(body)}


def borrowed_entries(body: Mapping[str, Any]) -> dict[Any, Any]:
    return {"all": slim(body)}


def values(index: Index | None, key: Any) -> list[Any]:
    return list(index.get(key, [])) if index is not None else []


@dataclass(frozen=True)
class Indexes:
    """The operator's caches, as kopf hands them to a daemon (or as a test builds them)."""

    deployments: Index = field(default_factory=dict)
    jobs: Index = field(default_factory=dict)
    config_maps: Index = field(default_factory=dict)
    profiles: Index = field(default_factory=dict)
    pods: Index = field(default_factory=dict)
    node_labels: Index = field(default_factory=dict)
    pdbs: Index = field(default_factory=dict)
    hpas: Index = field(default_factory=dict)
    borrowed: Index = field(default_factory=dict)


def world_for(kube: KubeApi, body: Mapping[str, Any], idx: Indexes) -> CachedWorld:
    """What one profile's pass reads, copied from the caches on the event loop."""
    meta = _meta(body)
    namespace, uid = str(meta.get("namespace") or ""), str(meta.get("uid") or "")
    return CachedWorld(
        kube=kube,
        deployments=values(idx.deployments, namespace),
        jobs=values(idx.jobs, uid),
        config_maps=values(idx.config_maps, uid) + values(idx.config_maps, namespace),
        profiles=values(idx.profiles, namespace),
        pods=values(idx.pods, namespace),
        node_labels={n: next(iter(s)) for n, s in idx.node_labels.items() if s},
        pdbs=values(idx.pdbs, namespace),
        hpas=values(idx.hpas, namespace),
        borrowed=values(idx.borrowed, "all"),
    )

