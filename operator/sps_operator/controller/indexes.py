"""What the operator's caches (kopf indexes) keep, under which keys, and what one
profile's pass takes from them (pure: kopf's indexes are mappings of key → values, and so
are the dicts the unit tests build with these same functions).

Two rules hold here by construction:

* A namespace is a tenant boundary. Every key carries the namespace of the object itself,
  as the API server reports it, never one read from a label; a profile's Jobs and
  ConfigMaps are found under its namespace and the UID of their controller
  ownerReference. Labels and UIDs identify, they never authorize: anyone who may create
  a ConfigMap may copy a label or a UID.
* A pass costs O(its own objects), not O(fleet). Deployments and pods are found through
  one of the label pairs their selectors require, profiles through one pair of what they
  select, a mounted ConfigMap through its name; only a selector with neither matchLabels
  nor an In expression looks at its whole namespace.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from sps_operator.api import labels as L
from sps_operator.constants import API_GROUP, KIND, LABEL_PREFIX
from sps_operator.controller.finalizer import mounted_config_maps
from sps_operator.controller.kube.builders import ProfileRef, base_labels
from sps_operator.controller.kube.client import Obj
from sps_operator.controller.kube.envsources import EnvSources, referenced_config_maps
from sps_operator.controller.kube.projections import (
    project_config_map,
    project_deployment,
    project_hpa,
    project_job,
    project_pdb,
    project_workload,
)
from sps_operator.controller.passes.state import Snapshot, by_name
from sps_operator.controller.policies import workloads
from sps_operator.controller.policies.borrow import PoolBid, pdb_covers, pool_bid
from sps_operator.controller.policies.claims import ClaimInfo, claim_info, pod_claims
from sps_operator.controller.policies.job_policy import ServiceInfo, service_info
from sps_operator.controller.policies.ownership import (
    ProfileSummary,
    profile_summary,
    recorded_owner,
    stable_config_map,
)
from sps_operator.controller.policies.placement import PodInfo, pod_info
from sps_operator.controller.policies.selectors import matches_selector

Key = tuple[str, ...]
Index = Mapping[Any, Iterable[Any]]

# Key tags (the first element of every key).
NAMESPACE = "namespace"  # (NAMESPACE, ns): every object of the namespace
LABEL = "label"  # (LABEL, ns, key, value): objects carrying that label
TEMPLATE = "template"  # (TEMPLATE, ns, key, value): Deployments whose pods carry it
PODS = "pods"  # (PODS, ns, key, value | ANY): Deployments whose pod selector needs it
MOUNTS = "mounts"  # (MOUNTS, ns, configmap): Deployments whose pod template mounts it
ENV = "env"  # (ENV, ns, configmap): Deployments whose containers read env from it
RECORDED = "recorded"  # (RECORDED, ns, profile): Deployments recording that owner
# (LENDING, ns): StatefulSets and LeaderWorkerSets carrying a borrow record (a Deployment's
# are in their own index, `sps_borrowed`, filtered on the annotation by kopf).
LENDING = "lending"
OWNER = "owner"  # (OWNER, ns, uid): objects whose controller is that SpsProfile
NAME = "name"  # (NAME, ns, name): a ConfigMap, a profile, by name
SELECTS = "selects"  # (SELECTS, ns, key, value | ANY): profiles whose selector needs it
STABLE = "stable"  # (STABLE, ns, configmap): AnnotateOnly profiles naming that ConfigMap
NODE = "node"  # (NODE, node): namespaces with a pod on that node
POOL = "pool"  # (POOL, gpu product): profiles whose run waits for its turn to borrow there
QUEUE_MISSING = "queue-missing"  # (QUEUE_MISSING, ns): runs waiting for a LocalQueue
ANY = "*"  # a selector that needs no particular label
# (PODS, ns, OPERATOR_KEYS): pod selectors that name one of the operator's own label keys
# (a run's labels on a profiling pod are not known before the run starts).
OPERATOR_KEYS = f"{LABEL_PREFIX}/*"


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def _namespace(body: Mapping[str, Any]) -> str:
    return str(_meta(body).get("namespace") or "")


def _labels(body: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(body).get("labels") or {}


def _template_labels(deployment: Mapping[str, Any]) -> Mapping[str, str]:
    """The labels of the workload's server pods (its one template, a LeaderWorkerSet's
    leader's)."""
    return (workloads.server_template(deployment).get("metadata") or {}).get("labels") or {}


def _pod_selector(deployment: Mapping[str, Any]) -> Any:
    return workloads.pod_selector(deployment)


class Chained(Mapping[Any, list[Any]]):
    """Several indexes read as one (the workload indexes, one per kind: kopf keeps an
    index per resource): a key's values from each, in order."""

    def __init__(self, *indexes: Index | None) -> None:
        self._indexes = [i for i in indexes if i is not None]

    def __getitem__(self, key: Any) -> list[Any]:
        if not any(key in i for i in self._indexes):
            raise KeyError(key)
        return [v for i in self._indexes for v in i.get(key, ())]

    def __contains__(self, key: object) -> bool:
        return any(key in i for i in self._indexes)

    def __iter__(self) -> Iterator[Any]:
        return iter({k: None for i in self._indexes for k in i})

    def __len__(self) -> int:
        return len({k for i in self._indexes for k in i})


def controller_profile(body: Mapping[str, Any]) -> str | None:
    """The UID of the SpsProfile that is `body`'s controller (None: none is)."""
    refs = _meta(body).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if (
            isinstance(ref, Mapping)
            and ref.get("controller")
            and ref.get("kind") == KIND
            and str(ref.get("apiVersion", "")).startswith(f"{API_GROUP}/")
            and ref.get("uid")
        ):
            return str(ref["uid"])
    return None


# --------------------------------------------------------------------------- selectors


def _requirements(selector: Any) -> list[list[tuple[str, str]]] | None:
    """For each requirement of `selector` that names values, the label pairs of which an
    object it matches carries one: a matchLabels pair alone, an In expression one pair per
    value. None when there is no such requirement (any object may match)."""
    if not isinstance(selector, Mapping):
        return None
    options = [[(str(k), str(v))] for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        if isinstance(expr, Mapping) and expr.get("operator") == "In":
            options.append([(str(expr.get("key")), str(v)) for v in expr.get("values") or []])
    return options or None


def selector_keys(tag: str, namespace: str, selector: Any) -> list[Key]:
    """Where to file something that selects by `selector`: under one requirement's pairs
    (every object it matches carries one of them), or under ANY."""
    options = _requirements(selector)
    if options is None:
        return [(tag, namespace, ANY)]
    return [(tag, namespace, key, value) for key, value in options[0]]


def with_label(index: Index, tag: str, namespace: str, selector: Any) -> list[Any]:
    """Candidates for `selector` from an index of objects filed under each of their label
    pairs: those carrying the pairs of its narrowest requirement (a superset of its
    matches; the caller matches them). The whole namespace only when the selector names
    no value."""
    options = _requirements(selector)
    if options is None:
        return list(index.get((NAMESPACE, namespace), ()))

    def size(option: list[tuple[str, str]]) -> int:
        return sum(len(list(index.get((tag, namespace, k, v), ()))) for k, v in option)

    best = min(options, key=size)
    return [value for k, v in best for value in index.get((tag, namespace, k, v), ())]


def selecting(index: Index, tag: str, namespace: str, labels: Mapping[str, str]) -> list[Any]:
    """Candidates among things filed with `selector_keys` whose selectors may match an
    object carrying `labels` (a superset; the caller matches them)."""
    keys = [(tag, namespace, k, v) for k, v in labels.items()] + [(tag, namespace, ANY)]
    return [value for key in keys for value in index.get(key, ())]


def _names_operator_keys(selector: Mapping[str, Any]) -> bool:
    keys = [str(k) for k in selector.get("matchLabels") or {}]
    keys += [
        str(e.get("key")) for e in selector.get("matchExpressions") or [] if isinstance(e, Mapping)
    ]
    return any(k.startswith(f"{LABEL_PREFIX}/") for k in keys)


def pod_selector_keys(namespace: str, selector: Any) -> list[Key]:
    """Where to file something that selects pods by `selector`; nothing for no selector
    (it selects no pod)."""
    if not isinstance(selector, Mapping) or not selector:
        return []
    keys = selector_keys(PODS, namespace, selector)
    if _names_operator_keys(selector):
        keys.append((PODS, namespace, OPERATOR_KEYS))
    return keys


# --------------------------------------------------------------------------- the entries


def deployment_entries(body: Mapping[str, Any], kind: str = workloads.DEPLOYMENT) -> dict[Key, Any]:
    """A workload of any kind (`kind`: the resource its watch serves, set on the value,
    which a LIST's items lack) as a pass reads it, filed as a pass and the wake-ups look
    for it: its projection for its kind (bounded, and so are its keys)."""
    projected = project_workload(body, kind)
    ns, value = _namespace(body), {**projected, "kind": kind}
    keys: list[Key] = [(NAMESPACE, ns)]
    keys += [(LABEL, ns, k, v) for k, v in _labels(value).items()]
    keys += [(TEMPLATE, ns, k, v) for k, v in _template_labels(value).items()]
    keys += pod_selector_keys(ns, _pod_selector(value))
    keys += [(MOUNTS, ns, name) for name in sorted(mounted_config_maps(value))]
    keys += [(ENV, ns, name) for name in sorted(referenced_config_maps([value]))]
    owner = recorded_owner(value)
    if owner:
        keys.append((RECORDED, ns, owner))
    annotations = _meta(value).get("annotations")
    if kind != workloads.DEPLOYMENT and L.ANNOTATION_BORROWED in (annotations or {}):
        keys.append((LENDING, ns))
    return dict.fromkeys(keys, value)


def job_entries(body: Mapping[str, Any]) -> dict[Key, Any]:
    owner = controller_profile(body)
    return {(OWNER, _namespace(body), owner): project_job(body)} if owner else {}


def config_map_entries(body: Mapping[str, Any]) -> dict[Key, Any]:
    """A ConfigMap carrying the operator's label (anyone may set it): its projection, the
    data only when small (`Pass.config_map` reads a larger one when a pass needs it)."""
    ns, value = _namespace(body), project_config_map(body)
    entries: dict[Key, Any] = {(NAME, ns, str(_meta(body).get("name", ""))): value}
    owner = controller_profile(value)
    if owner:
        entries[(OWNER, ns, owner)] = value
    return entries


def profile_entries(body: Mapping[str, Any]) -> dict[Key, Any]:
    ns, summary = _namespace(body), profile_summary(body)
    keys: list[Key] = [(NAMESPACE, ns), (NAME, ns, summary.name)]
    keys += selector_keys(SELECTS, ns, summary.selector)
    if summary.stable:
        keys.append((STABLE, ns, summary.stable))
    if summary.pool_product:
        keys.append((POOL, summary.pool_product))
    if summary.queue_missing:
        keys.append((QUEUE_MISSING, ns))
    return dict.fromkeys(keys, summary)


def pod_entries(body: Mapping[str, Any]) -> dict[Key, Any]:
    meta, ns = _meta(body), _namespace(body)
    info = pod_info(
        str(meta.get("name", "")),
        meta.get("labels") or {},
        body.get("spec") or {},
        body.get("status") or {},
        meta,
    )
    entries: dict[Key, Any] = {(NAMESPACE, ns): info}
    entries.update(((LABEL, ns, k, v), info) for k, v in info.labels.items())
    if info.node:
        entries[(NODE, info.node)] = ns
    return entries


def service_entries(body: Mapping[str, Any]) -> dict[Key, Any]:
    """A Service's selector (a plain label map), by name and by what its pods need."""
    ns, meta = _namespace(body), _meta(body)
    info = service_info(str(meta.get("name", "")), body.get("spec") or {})
    keys: list[Key] = [(NAME, ns, info.name)]
    if info.selector:
        keys += pod_selector_keys(ns, {"matchLabels": dict(info.selector)})
    return dict.fromkeys(keys, info)


def claim_entries(body: Mapping[str, Any]) -> dict[Key, Any]:
    """A PersistentVolumeClaim's access modes, by name."""
    ns, meta = _namespace(body), _meta(body)
    info = claim_info(str(meta.get("name", "")), body.get("spec") or {}, body.get("status") or {})
    return {(NAME, ns, info.name): info}


def node_entries(body: Mapping[str, Any]) -> dict[Any, Any]:
    return {_meta(body).get("name"): dict(_labels(body))}


def pdb_entries(body: Mapping[str, Any]) -> dict[Key, Any]:
    """A PodDisruptionBudget's projection (its selector bounded), by namespace."""
    return {(NAMESPACE, _namespace(body)): project_pdb(body)}


def hpa_entries(body: Mapping[str, Any]) -> dict[Key, Any]:
    """A HorizontalPodAutoscaler's projection (what it scales), by namespace."""
    return {(NAMESPACE, _namespace(body)): project_hpa(body)}


def borrowed_entries(body: Mapping[str, Any]) -> dict[Key, Any]:
    """Deployments carrying a borrow record, by namespace: a pass reads its own namespace's
    only, so what another tenant annotates costs it nothing."""
    return {(NAMESPACE, _namespace(body)): project_deployment(body)}


# --------------------------------------------------------------------------- lookups


def values(index: Index | None, key: Any) -> list[Any]:
    return list(index.get(key, ())) if index is not None else []


def profiles_for(profiles: Index, namespace: str, deployment: Mapping[str, Any]) -> list[Any]:
    """The profiles that may select `deployment` or are recorded as its owner (a
    superset: `ownership.owner_of` and the wake-ups decide), each once."""
    found = {p.uid: p for p in selecting(profiles, SELECTS, namespace, _labels(deployment))}
    owner = recorded_owner(deployment)
    if owner:
        found.update((p.uid, p) for p in profiles.get((NAME, namespace, owner), ()))
    return list(found.values())


def pods_of(pods: Index, namespace: str, deployment: Mapping[str, Any]) -> list[PodInfo]:
    """The pods `deployment`'s selector matches."""
    selector = _pod_selector(deployment)
    if not isinstance(selector, Mapping):
        return []
    return [p for p in with_label(pods, LABEL, namespace, selector)
            if matches_selector(selector, p.labels)]  # fmt: skip


def deployments_for_pod(deployments: Index, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
    """The Deployments whose pod selector matches a pod carrying `labels`."""
    return [
        d
        for d in selecting(deployments, PODS, namespace, labels)
        if isinstance(_pod_selector(d), Mapping) and matches_selector(_pod_selector(d), labels)
    ]


def deployments_selected(deployments: Index, namespace: str, selector: Any) -> list[Obj]:
    """The Deployments `selector` (a profile's) matches."""
    if not isinstance(selector, Mapping):
        return []
    return [d for d in with_label(deployments, LABEL, namespace, selector)
            if matches_selector(selector, _labels(d))]  # fmt: skip


def deployments_covered(deployments: Index, namespace: str, selector: Any) -> list[Obj]:
    """The Deployments whose pods `selector` (a PodDisruptionBudget's) matches: an empty
    one (`{}`) every Deployment of the namespace (policy/v1), a null one none."""
    if not isinstance(selector, Mapping):
        return []
    pdb = {"spec": {"selector": selector}}
    return [d for d in with_label(deployments, TEMPLATE, namespace, selector)
            if pdb_covers(pdb, _template_labels(d))]  # fmt: skip


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
    services: Index = field(default_factory=dict)
    claims: Index = field(default_factory=dict)


def _selecting_pod(index: Index, namespace: str, labels: Mapping[str, str]) -> list[Any]:
    """Candidates among things filed with `pod_selector_keys` that may select a pod
    carrying `labels` and, of the operator's own keys, any values."""
    found = selecting(index, PODS, namespace, labels)
    found += values(index, (PODS, namespace, OPERATOR_KEYS))
    unique: dict[int, Any] = {id(v): v for v in found}
    return list(unique.values())


def _pod_selectors_for(
    idx: Indexes, body: Mapping[str, Any], job_labels: Mapping[str, str]
) -> tuple[list[Obj], list[ServiceInfo]]:
    """The Deployments and Services that may select this profile's profiling pod, and the
    Service its External server.url names (the policy decides). None when the pod carries
    only the operator's own labels: it then passes for nobody's pod."""
    meta, spec = _meta(body), body.get("spec") or {}
    ns = str(meta.get("namespace") or "")
    job = spec.get("job") if isinstance(spec, Mapping) else None
    added = {**job_labels, **((job or {}).get("labels") or {} if isinstance(job, Mapping) else {})}
    services: list[ServiceInfo] = []
    server = spec.get("server") if isinstance(spec, Mapping) else None
    url = (server or {}).get("url") if isinstance(server, Mapping) else None
    if isinstance(url, str):
        host = url.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0].split(".")
        if len(host) > 2 and host[1] == ns and host[2] == "svc":
            services += values(idx.services, (NAME, ns, host[0]))
    if not added:
        return [], services
    ref = ProfileRef(str(meta.get("name") or ""), ns, str(meta.get("uid") or ""))
    labels = {**{str(k): str(v) for k, v in added.items()}, **base_labels(ref, L.COMPONENT_POD)}
    deployments = _selecting_pod(idx.deployments, ns, labels)
    services += [s for s in _selecting_pod(idx.services, ns, labels) if s not in services]
    return deployments, services


def pool_bids(idx: Indexes, body: Mapping[str, Any]) -> list[PoolBid]:
    """The runs (any namespace) waiting for their turn to borrow on the GPU product of this
    profile's run, each placed by its own pending pod. O(those runs)."""
    status = body.get("status")
    run = status.get("currentRun") if isinstance(status, Mapping) else None
    product = run.get("gpuProduct") if isinstance(run, Mapping) else None
    if not isinstance(product, str) or not product:
        return []
    bids = []
    for summary in values(idx.profiles, (POOL, product)):
        if summary.deleting or not summary.pool_run or not summary.pool_job_uid:
            continue
        # Its Job: the operator's (controller: the profile), the UID its status records.
        job = next(
            (j for j in values(idx.jobs, (OWNER, summary.namespace, summary.uid))
             if _meta(j).get("uid") == summary.pool_job_uid),
            None,
        )  # fmt: skip
        pods = values(idx.pods, (LABEL, summary.namespace, L.LABEL_RUN, summary.pool_run))
        holder = f"{summary.namespace}/{summary.name}"
        bid = pool_bid(holder, summary.uid, product, pods, job)
        if bid is not None:
            bids.append(bid)
    return bids


def world_for(
    body: Mapping[str, Any],
    idx: Indexes,
    job_labels: Mapping[str, str] | None = None,
    env_sources: EnvSources | None = None,
) -> Snapshot:
    """What one profile's pass reads, copied from the caches on the event loop (a pass
    then reads it from any thread): its selected Deployments, the profiles that select or
    own one of them or name its stable ConfigMap, their pods and those of its Jobs, the
    labels of those pods' nodes, its Jobs and ConfigMaps, its stable ConfigMap, which of
    its ConfigMaps a Deployment of the namespace mounts. O(these), not O(namespace)."""
    meta = _meta(body)
    ns, uid = str(meta.get("namespace") or ""), str(meta.get("uid") or "")
    spec = body.get("spec") or {}
    selector = spec.get("selector") if isinstance(spec, Mapping) else None
    deployments = deployments_selected(idx.deployments, ns, selector)
    profiles: dict[str, ProfileSummary] = {}
    pods: dict[str, PodInfo] = {}
    for dep in deployments:
        profiles.update((p.uid, p) for p in profiles_for(idx.profiles, ns, dep))
        pods.update((p.name, p) for p in pods_of(idx.pods, ns, dep))
    pods.update((p.name, p) for p in values(idx.pods, (LABEL, ns, L.LABEL_PROFILE_UID, uid)))
    stable_name = stable_config_map(spec) if isinstance(spec, Mapping) else None
    stable = None
    if stable_name:
        profiles.update((p.uid, p) for p in values(idx.profiles, (STABLE, ns, stable_name)))
        stable = next(iter(values(idx.config_maps, (NAME, ns, stable_name))), None)
    config_maps = values(idx.config_maps, (OWNER, ns, uid))
    names = [str(_meta(c).get("name", "")) for c in config_maps] + [stable_name or ""]
    nodes = {p.node for p in pods.values() if p.node}
    claims: dict[str, ClaimInfo] = {}
    for dep in deployments:
        for _, template in workloads.templates(dep):
            for claim in pod_claims(template.get("spec") or {}):
                claims.update((c.name, c) for c in values(idx.claims, (NAME, ns, claim)))
    pod_selecting, services = _pod_selectors_for(idx, body, job_labels or {})
    return Snapshot(
        pool_bids=pool_bids(idx, body),
        deployments=deployments,
        jobs=by_name(values(idx.jobs, (OWNER, ns, uid))),
        config_maps=by_name(config_maps),
        stable=stable,
        profiles=list(profiles.values()),
        pods=list(pods.values()),
        node_labels={n: next(iter(s)) for n in nodes if (s := values(idx.node_labels, n))},
        pdbs=values(idx.pdbs, (NAMESPACE, ns)),
        hpas=values(idx.hpas, (NAMESPACE, ns)),
        borrowed=values(idx.borrowed, (NAMESPACE, ns)) + values(idx.deployments, (LENDING, ns)),
        mounted=frozenset(n for n in names if n and (MOUNTS, ns, n) in idx.deployments),
        pod_selecting_deployments=pod_selecting,
        services=services,
        env_sources=env_sources,
        claims=claims,
    )
