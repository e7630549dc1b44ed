"""What the operator's caches keep of each object it watches in every namespace: only what
a pass reads, each part bounded (pure, no I/O). Anyone may create Deployments,
PodDisruptionBudgets, HorizontalPodAutoscalers and ConfigMaps (with the operator's
managed-by label, which anyone may set) in their own namespace, at no compute cost and up
to the API server's object size; kept whole, ~450 objects of ~1 MB in one namespace pass
the operator's memory limit and it is killed for every tenant (issue 33 §2).

So a projection keeps, per kind, the fields a pass reads, and of a part over its bound a
stub that says what was left out and its size, chosen so a pass answers the same or fails
safe:

* annotations: only the operator's own keys (`sps.dev/…`, its known ones first) and the
  cluster's (`kubernetes.io/`, `k8s.io/`, which mark system objects); any other annotation
  is never read. `kubectl.kubernetes.io/last-applied-configuration` (a copy of the whole
  object) goes. ownerReferences: the controller's only, but a ConfigMap's (a table's
  holders, written back whole).
* a workload's spec (Deployment, StatefulSet, LeaderWorkerSet: `project_workload`): what
  the adapter (`policies/workloads.py`) reads of its kind, each field a scalar.
* each of a workload's pod templates: whole up to `MAX_INLINE_TEMPLATE_BYTES`; up to the
  `MAX_TARGET_TEMPLATE_BYTES` a pass parses, a stub (the ConfigMaps it mounts and reads
  env from, its claims) and the pass of a profile selecting it reads the workload with a
  GET of its kind; beyond, a stub carrying, per container, the `TargetTooLarge` message
  the pass gives today (`target_size_problem` reads it back).
* labels and selectors over `MAX_SELECTION_BYTES`: dropped (a Deployment then selects
  nothing and no profile selects it; its template becomes the stub above, saying why).
* a PodDisruptionBudget's selector over `MAX_PDB_SELECTOR_BYTES`: `{}`, which covers
  every pod of its namespace (policy/v1): the borrow treats it as protecting everything.
* a ConfigMap's data over `MAX_INLINE_DATA_BYTES`: left out (`data_omitted`); a pass that
  needs the bytes reads them with a GET (`Pass.config_map`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sps_operator.api import labels as L
from sps_operator.api.limits import MAX_TARGET_TEMPLATE_BYTES
from sps_operator.constants import GPU_RESOURCE, LABEL_PREFIX
from sps_operator.controller.policies import workloads
from sps_operator.controller.policies.claims import pod_claims
from sps_operator.controller.policies.ownership import mounted_config_maps
from sps_operator.controller.policies.stable_writers import SYSTEM_PREFIXES
from sps_operator.controller.sglang.podenv import env_config_maps
from sps_operator.controller.sglang.serverread import SIZE_PROBLEM, target_size_problem

# Where a projection says what it left out ({part: its size in bytes as JSON}).
OMITTED = "spsOmitted"

MAX_ANNOTATION_VALUE = 4096  # the operator writes a few hundred bytes at most
MAX_KEPT_ANNOTATIONS = 16  # the operator's own keys are 8; the cluster's few
MAX_SELECTION_BYTES = 32 * 1024  # labels, template labels and selector of one object
MAX_PDB_SELECTOR_BYTES = 16 * 1024
MAX_OWNER_REFERENCES = 256  # a table is held by each Deployment that mounts it
MAX_OWNER_REFERENCE_BYTES = 64 * 1024
MAX_MANAGERS = 32
MAX_CONDITIONS = 16
MAX_TEXT = 1024  # a scalar field, a condition's message
MAX_STUB_NAMES = 64  # containers and mounted ConfigMaps a stub names
MAX_INLINE_DATA_BYTES = 16 * 1024  # a ConfigMap's data kept in the cache
# A pod template kept whole (real ones are a few KiB to a few tens of KiB); a larger one
# within the parse bound is read with a GET by the pass of a profile that selects it.
MAX_INLINE_TEMPLATE_BYTES = 32 * 1024
UNREADABLE_VALUE = "(over the operator's bound: not kept)"

_OWN_PREFIX = f"{LABEL_PREFIX}/"
_BORROWED_KEY = f"f:{L.ANNOTATION_BORROWED}"
_KNOWN_ANNOTATIONS = frozenset(
    str(v) for k, v in vars(L).items() if k.startswith("ANNOTATION_") and isinstance(v, str)
)
_SCALAR_META = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
)
_REF_FIELDS = ("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")
_CONDITION_FIELDS = ("type", "status", "reason", "message", "lastUpdateTime", "lastTransitionTime")


def json_size(value: Any) -> int:
    """Bytes of `value` as compact JSON; anything unreadable counts as over every bound."""
    try:
        return len(json.dumps(value, separators=(",", ":"), default=str))
    except (TypeError, ValueError, RecursionError):
        return 2**62


def _scalar(value: Any) -> Any:
    """A JSON scalar kept as is; a long string cut, anything else (a nested value where a
    scalar belongs) dropped as None."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return value[:MAX_TEXT]
    return None


def _pick(source: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(source, Mapping):
        return {}
    return {f: _scalar(source[f]) for f in fields if f in source}


def _string_map(value: Any, bound: int) -> tuple[dict[str, str], int | None]:
    """A label map kept whole within `bound` (None), or {} and its size."""
    if not isinstance(value, Mapping):
        return {}, None
    size = json_size(value)
    if size > bound:
        return {}, size
    return {str(k): str(v) for k, v in value.items()}, None


def kept_annotations(value: Any) -> dict[str, str]:
    """The operator's own annotations (its known keys first, so no number of other keys
    under its prefix pushes one out) and the cluster's, each value bounded (a value over
    the bound is replaced by one no reader accepts: the operator writes short ones)."""
    if not isinstance(value, Mapping):
        return {}
    keys = [str(k) for k in value if str(k).startswith((_OWN_PREFIX, *SYSTEM_PREFIXES))]
    keys = sorted(keys, key=lambda k: (k not in _KNOWN_ANNOTATIONS, k))
    kept: dict[str, str] = {}
    for key in keys[:MAX_KEPT_ANNOTATIONS]:
        if len(key) > MAX_TEXT:
            continue
        text = value[key]
        text = text if isinstance(text, str) else json.dumps(_scalar(text))
        kept[key] = text if len(text) <= MAX_ANNOTATION_VALUE else UNREADABLE_VALUE
    return kept


def _managed_fields(entries: Any) -> list[dict[str, Any]]:
    """Of managedFields, who owns spec.replicas (BorrowReplica must know who scales) and
    who wrote the borrow record (only the operator's own is trusted)."""
    kept: list[dict[str, Any]] = []
    for m in entries if isinstance(entries, list) else []:
        if not isinstance(m, Mapping) or len(kept) >= MAX_MANAGERS:
            continue
        fields = m.get("fieldsV1")
        fields = fields if isinstance(fields, Mapping) else {}
        slimmed: dict[str, Any] = {}
        spec = fields.get("f:spec")
        if isinstance(spec, Mapping) and "f:replicas" in spec:
            slimmed["f:spec"] = {"f:replicas": {}}
        meta = fields.get("f:metadata")
        owned = meta.get("f:annotations") if isinstance(meta, Mapping) else None
        if isinstance(owned, Mapping) and _BORROWED_KEY in owned:
            slimmed["f:metadata"] = {"f:annotations": {_BORROWED_KEY: {}}}
        if slimmed:
            manager, operation = _scalar(m.get("manager")), _scalar(m.get("operation"))
            kept.append({"manager": manager, "operation": operation, "fieldsV1": slimmed})
    return kept


def metadata(
    body: Mapping[str, Any], omitted: dict[str, int], all_owners: bool = False
) -> dict[str, Any]:
    """What a pass reads of any object's metadata, bounded; what was left out goes to
    `omitted`. Of ownerReferences only the controller's, unless `all_owners` (a table's
    holders, which the operator writes back whole)."""
    meta = body.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    out = _pick(meta, _SCALAR_META)
    labels, size = _string_map(meta.get("labels"), MAX_SELECTION_BYTES)
    out["labels"] = labels
    if size is not None:
        omitted["labels"] = size
    out["annotations"] = kept_annotations(meta.get("annotations"))
    refs = meta.get("ownerReferences")
    if isinstance(refs, list) and not all_owners:
        refs = [r for r in refs if isinstance(r, Mapping) and r.get("controller") is True][:1]
    if isinstance(refs, list) and refs:
        kept = [_pick(r, _REF_FIELDS) for r in refs[: MAX_OWNER_REFERENCES + 1]]
        size = json_size(kept)
        if len(refs) <= MAX_OWNER_REFERENCES and size <= MAX_OWNER_REFERENCE_BYTES:
            out["ownerReferences"] = kept
        else:  # no owner then: the operator's objects are never held by so many
            omitted["ownerReferences"] = size
    out["managedFields"] = _managed_fields(meta.get("managedFields"))
    return out


def _with_omitted(obj: dict[str, Any], omitted: dict[str, int]) -> dict[str, Any]:
    if omitted:
        obj[OMITTED] = omitted
    return obj


def _header(body: Mapping[str, Any]) -> dict[str, Any]:
    return _pick(body, ("apiVersion", "kind"))


# --------------------------------------------------------------------------- Deployments


def _pod_spec_stub(pod_spec: Mapping[str, Any], problem: str | None) -> dict[str, Any]:
    """What the caches keep of a pod template they do not keep whole: its containers by
    name, each with the ConfigMaps it reads env from (wake-ups); the ConfigMaps and claims
    it mounts (nothing mounted is deleted; a clone's claims). With a `problem`, why the
    pass does not read it, per container (`target_size_problem` gives it back); without,
    the pass reads the whole Deployment with a GET (`Snapshot.for_profile`)."""
    listed = pod_spec.get("containers")
    containers = [c for c in listed if isinstance(c, Mapping)] if isinstance(listed, list) else []
    stub_containers = []
    names = MAX_STUB_NAMES  # ConfigMaps read env from, over all containers
    for c in containers[:MAX_STUB_NAMES]:
        stub: dict[str, Any] = {"name": _scalar(c.get("name"))}
        try:
            reads = sorted(env_config_maps({"containers": [c]}))[:names]
        except Exception:  # a malformed env list reads nothing
            reads = []
        names -= len(reads)
        if reads:
            stub["envFrom"] = [{"configMapRef": {"name": n[:MAX_TEXT]}} for n in reads]
        if problem is not None:
            # The container's own limits (its command line, its env) come first, as in
            # the pass; checked without the template, measured once already.
            try:
                own = target_size_problem({}, c) or problem
            except Exception:  # any value a tenant wrote: the template's problem stands
                own = problem
            if own != problem:
                stub[SIZE_PROBLEM] = own
        stub_containers.append(stub)
    try:
        mounted = sorted(mounted_config_maps({"spec": {"template": {"spec": pod_spec}}}))
        claims = list(pod_claims(pod_spec))
    except Exception:  # a malformed volume list mounts nothing readable
        mounted, claims = [], []
    volumes: list[dict[str, Any]] = [
        {"name": f"mounted-{i}", "configMap": {"name": n[:MAX_TEXT]}}
        for i, n in enumerate(mounted[:MAX_STUB_NAMES])
    ]
    volumes += [{"name": f"claim-{i}", "persistentVolumeClaim": {"claimName": n}}
                for i, n in enumerate(claims)]  # fmt: skip
    stub_spec: dict[str, Any] = {"containers": stub_containers, "volumes": volumes}
    if problem is not None:
        stub_spec[SIZE_PROBLEM] = problem
    return stub_spec


def _template_key(path: workloads.Path) -> str:
    """Where `OMITTED` says a template at `path` was kept as a stub."""
    return "template" if path == ("spec", "template") else f"template:{path[-1]}"


def template_omitted(workload: Mapping[str, Any]) -> bool:
    """The caches keep only a stub of one of this workload's pod templates, which the pass
    reads (within the bound it parses): read the workload to have them. Not when the
    server's template is over that bound: the pass refuses it before reading any other."""
    omitted = _as_map(workload.get(OMITTED))
    refused = [SIZE_PROBLEM in _as_map(t.get("spec")) for _, t in workloads.templates(workload)]
    stubbed = [_template_key(p) in omitted for p, _ in workloads.templates(workload)]
    if not stubbed or refused[0]:
        return False
    return any(s and not r for s, r in zip(stubbed, refused, strict=True))


def _as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _template(
    template: Any, selection_problem: str | None, omitted: dict[str, int], key: str
) -> Any:
    """A pod template whole within `MAX_INLINE_TEMPLATE_BYTES`; else a stub
    (`_pod_spec_stub`, its size under `key` in `omitted`) that carries, over the bound
    the pass parses, the pass's own message (as `target_size_problem` words it)."""
    if not isinstance(template, Mapping):
        return template if template is None else {}
    meta = _as_map(template.get("metadata"))
    labels, _ = _string_map(None if selection_problem else meta.get("labels"), 2**62)
    kept_meta = {"labels": labels, "annotations": kept_annotations(meta.get("annotations"))}
    pod_spec = _as_map(template.get("spec"))
    size = json_size(pod_spec)
    problem = selection_problem
    if problem is None and size > MAX_TARGET_TEMPLATE_BYTES:
        problem = target_size_problem(pod_spec, None)  # the pass's message, as today
    if problem is None and size <= MAX_INLINE_TEMPLATE_BYTES:
        return {"metadata": kept_meta, "spec": pod_spec}
    omitted[key] = size
    return {"metadata": kept_meta, "spec": _pod_spec_stub(pod_spec, problem)}


def _selection_problem(
    kind: str, body: Mapping[str, Any], selector: Any, omitted: dict[str, int]
) -> str | None:
    """Why no profile selects the workload: its labels, its templates' and its selector
    over `MAX_SELECTION_BYTES` (then all are dropped; its templates become stubs)."""
    templates = workloads.templates({**body, "kind": kind})
    selection = {
        "labels": _as_map(body.get("metadata")).get("labels"),
        "template": [_as_map(t.get("metadata")).get("labels") for _, t in templates],
        "selector": selector,
    }
    if kind == workloads.DEPLOYMENT:  # as measured before the other kinds were projected
        selection["template"] = selection["template"][0] if templates else None
    size = json_size(selection)
    if size <= MAX_SELECTION_BYTES:
        return None
    omitted["selection"] = size
    return (
        f"the {kind}'s labels and selector are {size} bytes as JSON; the operator reads at "
        f"most {MAX_SELECTION_BYTES}"
    )


def _status(body: Mapping[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    status = body.get("status")
    kept = _pick(status, fields)
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if isinstance(conditions, list):
        kept["conditions"] = [_pick(c, _CONDITION_FIELDS) for c in conditions[:MAX_CONDITIONS]]
    return kept


def _rolling(strategy: Any, rolling_key: str, fields: tuple[str, ...]) -> dict[str, Any] | None:
    """An update strategy as the adapter reads it: its type and its rolling parameters,
    each a scalar (so no size of it reaches the cache, and none of it is lost)."""
    if not isinstance(strategy, Mapping):
        return None
    kept = _pick(strategy, ("type",))
    if rolling_key in strategy:
        kept[rolling_key] = _pick(strategy[rolling_key], fields)
    return kept


def _workload(
    body: Mapping[str, Any],
    kind: str,
    spec_fields: tuple[str, ...],
    status_fields: tuple[str, ...],
    omitted: dict[str, int],
) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """The parts every workload kind shares: header, metadata, scalar spec fields, the
    selector, the status; and why no profile selects it (None: its selection is kept)."""
    spec = _as_map(body.get("spec"))
    problem = _selection_problem(kind, body, spec.get("selector"), omitted)
    out = {
        **_header(body),
        "metadata": metadata(body, omitted),
        "status": _status(body, status_fields),
    }
    kept_spec = {k: _scalar(spec[k]) for k in spec_fields if k in spec}
    if "selector" in spec and kind != workloads.LEADER_WORKER_SET:
        kept_spec["selector"] = {} if problem else spec["selector"]
    return out, kept_spec, problem


def project_deployment(body: Mapping[str, Any]) -> dict[str, Any]:
    """What a pass reads of a Deployment: its identity, labels and the operator's
    annotations, replicas, selector, strategy and deadlines, its rollout status, and its
    pod template: whole within `MAX_INLINE_TEMPLATE_BYTES`; within the bound the pass
    parses a stub, the pass reading the Deployment when it selects it; beyond, a stub the
    pass refuses as TargetTooLarge."""
    omitted: dict[str, int] = {}
    spec = _as_map(body.get("spec"))
    out, kept_spec, problem = _workload(
        body,
        workloads.DEPLOYMENT,
        ("replicas", "minReadySeconds", "progressDeadlineSeconds", "revisionHistoryLimit",
         "paused"),
        ("replicas", "readyReplicas", "updatedReplicas", "availableReplicas",
         "unavailableReplicas", "observedGeneration", "collisionCount"),
        omitted,
    )  # fmt: skip
    strategy = spec.get("strategy")
    if isinstance(strategy, Mapping) and json_size(strategy) <= MAX_TEXT:
        kept_spec["strategy"] = dict(strategy)
    if "template" in spec:
        kept_spec["template"] = _template(spec["template"], problem, omitted, "template")
    return _with_omitted({**out, "spec": kept_spec}, omitted)


def project_stateful_set(body: Mapping[str, Any]) -> dict[str, Any]:
    """What a pass reads of a StatefulSet: as of a Deployment, with its update strategy
    (type, partition, maxUnavailable: what holds a roll up, how many pods it takes down)
    and the revisions that say a roll is done. Its volumeClaimTemplates are not read."""
    omitted: dict[str, int] = {}
    spec = _as_map(body.get("spec"))
    out, kept_spec, problem = _workload(
        body,
        workloads.STATEFUL_SET,
        ("replicas", "minReadySeconds", "serviceName", "podManagementPolicy",
         "revisionHistoryLimit"),
        ("replicas", "readyReplicas", "currentReplicas", "updatedReplicas",
         "availableReplicas", "currentRevision", "updateRevision", "observedGeneration",
         "collisionCount"),
        omitted,
    )  # fmt: skip
    strategy = _rolling(
        spec.get("updateStrategy"), "rollingUpdate", ("partition", "maxUnavailable")
    )
    if strategy is not None:
        kept_spec["updateStrategy"] = strategy
    if "template" in spec:
        kept_spec["template"] = _template(spec["template"], problem, omitted, "template")
    return _with_omitted({**out, "spec": kept_spec}, omitted)


def project_leader_worker_set(body: Mapping[str, Any]) -> dict[str, Any]:
    """What a pass reads of a LeaderWorkerSet: replicas (groups), the group's size, its
    rollout and startup policies, its status, and each of its two templates (the leader's
    optional) as a Deployment's is kept: whole, or a stub the pass reads with a GET, or a
    stub it refuses (then both are, so the pass refuses it at the server's template)."""
    omitted: dict[str, int] = {}
    spec = _as_map(body.get("spec"))
    out, kept_spec, problem = _workload(
        body,
        workloads.LEADER_WORKER_SET,
        ("replicas", "startupPolicy"),
        ("replicas", "readyReplicas", "updatedReplicas", "observedGeneration"),
        omitted,
    )
    strategy = _rolling(
        spec.get("rolloutStrategy"),
        "rollingUpdateConfiguration",
        ("partition", "maxSurge", "maxUnavailable"),
    )
    if strategy is not None:
        kept_spec["rolloutStrategy"] = strategy
    group = spec.get("leaderWorkerTemplate")
    if isinstance(group, Mapping):
        kept_group = _pick(group, ("size", "restartPolicy"))
        for key in ("leaderTemplate", "workerTemplate"):
            if key in group:
                path = ("spec", "leaderWorkerTemplate", key)
                kept_group[key] = _template(group[key], problem, omitted, _template_key(path))
        kept_spec["leaderWorkerTemplate"] = kept_group
    return _with_omitted({**out, "spec": kept_spec}, omitted)


def project_workload(body: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """A workload of any kind the operator serves (`kind`: its watch's) as a pass reads
    it (`policies.workloads`)."""
    if kind == workloads.STATEFUL_SET:
        return project_stateful_set(body)
    if kind == workloads.LEADER_WORKER_SET:
        return project_leader_worker_set(body)
    return project_deployment(body)


# --------------------------------------------------------------------------- the others


def project_pdb(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the borrow and the profiling pod's label check read of a PodDisruptionBudget:
    its name, selector (over its bound: `{}`, covering every pod), budget and status."""
    omitted: dict[str, int] = {}
    spec = body.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    kept_spec = _pick(spec, ("minAvailable", "maxUnavailable", "unhealthyPodEvictionPolicy"))
    if "selector" in spec:
        selector = spec["selector"]
        size = json_size(selector)
        if size > MAX_PDB_SELECTOR_BYTES:
            omitted["selector"] = size
            selector = {}  # fail safe: protects every pod of the namespace
        kept_spec["selector"] = selector
    status = _pick(
        body.get("status"),
        (
            "disruptionsAllowed",
            "currentHealthy",
            "desiredHealthy",
            "expectedPods",
            "observedGeneration",
        ),
    )
    out = {
        **_header(body),
        "metadata": metadata(body, omitted),
        "spec": kept_spec,
        "status": status,
    }
    return _with_omitted(out, omitted)


def project_hpa(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the borrow reads of a HorizontalPodAutoscaler: its name and what it scales."""
    omitted: dict[str, int] = {}
    spec = body.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    kept_spec = _pick(spec, ("minReplicas", "maxReplicas"))
    if "scaleTargetRef" in spec:
        kept_spec["scaleTargetRef"] = _pick(spec["scaleTargetRef"], ("apiVersion", "kind", "name"))
    out = {**_header(body), "metadata": metadata(body, omitted), "spec": kept_spec}
    return _with_omitted(out, omitted)


def project_config_map(body: Mapping[str, Any]) -> dict[str, Any]:
    """What a pass reads of a ConfigMap carrying the operator's label without a GET: its
    metadata, and its data when small (a table's; a larger one, a run's result or a
    tenant's, is read with a GET when a pass needs the bytes)."""
    omitted: dict[str, int] = {}
    out = {**_header(body), "metadata": metadata(body, omitted, all_owners=True)}
    if "immutable" in body:
        out["immutable"] = _scalar(body["immutable"])
    payload = {k: body[k] for k in ("data", "binaryData") if k in body}
    size = json_size(payload)
    if size <= MAX_INLINE_DATA_BYTES:
        out.update(payload)
    else:
        omitted["data"] = size
    return _with_omitted(out, omitted)


_JOB_SPEC = (
    "suspend",
    "parallelism",
    "completions",
    "completionMode",
    "backoffLimit",
    "backoffLimitPerIndex",
    "maxFailedIndexes",
    "activeDeadlineSeconds",
    "ttlSecondsAfterFinished",
)
_JOB_STATUS = (
    "active",
    "ready",
    "succeeded",
    "failed",
    "terminating",
    "startTime",
    "completionTime",
    "failedIndexes",
    "completedIndexes",
)


def _job_container(container: Any) -> dict[str, Any]:
    """Of a Job's container, what its GPU count reads (`policies.cost.pod_gpus`)."""
    c = _as_map(container)
    kept: dict[str, Any] = _pick(c, ("name", "restartPolicy"))
    resources = _as_map(c.get("resources"))
    for part in ("limits", "requests"):
        value = _as_map(resources.get(part)).get(GPU_RESOURCE)
        if value is not None:
            kept.setdefault("resources", {})[part] = {GPU_RESOURCE: _scalar(value)}
    return kept


def project_job(body: Mapping[str, Any]) -> dict[str, Any]:
    """What a pass reads of a Job carrying the operator's label (anyone may set it, and a
    suspended Job runs no pod): its metadata, its run's spec fields, its pod template's
    labels, PriorityClass and GPUs per container, and its status. Adopting a Job under a
    run's name compares it field by field with a GET (`profiling/outcome.create_owned`)."""
    omitted: dict[str, int] = {}
    spec = _as_map(body.get("spec"))
    kept_spec = _pick(spec, _JOB_SPEC)
    template = spec.get("template")
    if isinstance(template, Mapping):
        meta = _as_map(template.get("metadata"))
        labels, size = _string_map(meta.get("labels"), MAX_SELECTION_BYTES)
        if size is not None:
            omitted["template labels"] = size
        pod_spec = _as_map(template.get("spec"))
        kept_pod: dict[str, Any] = _pick(pod_spec, ("priorityClassName",))
        for part in ("containers", "initContainers"):
            listed = pod_spec.get(part)
            if isinstance(listed, list):
                kept_pod[part] = [_job_container(c) for c in listed[:MAX_STUB_NAMES]]
        kept_spec["template"] = {
            "metadata": {
                "labels": labels,
                "annotations": kept_annotations(meta.get("annotations")),
            },
            "spec": kept_pod,
        }
    out = {
        **_header(body),
        "metadata": metadata(body, omitted),
        "spec": kept_spec,
        "status": _status(body, _JOB_STATUS),
    }
    return _with_omitted(out, omitted)


def data_omitted(obj: Mapping[str, Any] | None) -> bool:
    """The projection left `obj`'s data out: read the object to have its bytes."""
    omitted = (obj or {}).get(OMITTED)
    return isinstance(omitted, Mapping) and "data" in omitted
