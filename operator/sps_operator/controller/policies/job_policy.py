"""What a profiling Job may be (pure): the cluster admin's policy and the rules no Job breaks.

A profile author writes `spec.job` and `spec.server`; the cluster admin (chart values
`jobPolicy.*`, the operator's flags) decides what they may ask for. Every check returns a
`Refusal` that names the rule and says what to fix, or None. The operator checks the Job
it would create (built, not yet created) at the start of a run and again before
Additive's phase 2, so a refused run creates nothing; a fixed spec runs at the next pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sps_operator.api import labels as L
from sps_operator.api.endpoints import forbidden_url_address
from sps_operator.api.reasons import (
    CLAIM_NODE_UNAVAILABLE,
    GPU_PIN_CONFLICT,
    JOB_LABELS_SELECT_PODS,
    JOB_POLICY,
    READ_WRITE_ONCE_POD_CLAIM,
)
from sps_operator.api.result import clean_text
from sps_operator.controller.policies.cost import pod_gpus
from sps_operator.controller.policies.run_job import group_pods
from sps_operator.controller.policies.selectors import matches_selector

if TYPE_CHECKING:  # the flags' defaults come from here: no pydantic at start-up
    from sps_operator.api.job import JobOverrides
    from sps_operator.api.spec import SpsProfileSpec

# Refusals before a run creates anything: the admin's policy, and the target's volume
# claims (controller/policies/claims.py) the clone can never share or attach now.
REFUSAL_REASONS = frozenset(
    {
        JOB_POLICY,
        GPU_PIN_CONFLICT,
        JOB_LABELS_SELECT_PODS,
        READ_WRITE_ONCE_POD_CLAIM,
        CLAIM_NODE_UNAVAILABLE,
    }
)

# Keys under these prefixes belong to the operator, Kubernetes and Kueue: a profile may set
# them only where the admin allows a pattern inside them (NameRule).
RESERVED_KEYS = (
    "sps.dev/*",
    "*.sps.dev/*",
    "kubernetes.io/*",
    "*.kubernetes.io/*",
    "k8s.io/*",
    "*.k8s.io/*",
    "kueue.x-k8s.io/*",
)
ALLOWED_KEYS = ("*", "app.kubernetes.io/*")
# The queue, priority and maximum execution time labels have rules of their own
# (allowedQueues, priorityClasses, maxActiveDeadlineSeconds).
KUEUE_RULED_LABELS = (L.LABEL_KUEUE_QUEUE, L.LABEL_KUEUE_PRIORITY, L.LABEL_KUEUE_MAX_EXEC)
NAMESPACE_PLACEHOLDER = "{namespace}"


@dataclass(frozen=True)
class BorrowBounds:
    """The admin's bounds of the holds of a shared GPU pool (seconds; chart borrowPolicy,
    flags --max-lent-seconds, --max-rollout-hold-seconds, --max-pool-turn-seconds)."""

    max_lent_seconds: float = 4 * 3600  # a replica lent to a run, from the borrow
    max_rollout_hold_seconds: float = 1800  # the slot kept for a rollout after the run
    max_pool_turn_seconds: float = 3600  # a head of line leaving the free pool unused


BORROW_BOUNDS = BorrowBounds()


@dataclass(frozen=True)
class Refusal:
    """Why the operator creates no Job for a run, and what to fix."""

    reason: str  # condition reason
    rule: str  # the rule, as the admin or the author can find it (a chart value, a field)
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


@dataclass(frozen=True)
class NameRule:
    """Names a profile may use (label and annotation keys, PriorityClasses), as fnmatch
    patterns. A name must match an allowed pattern; a name that also matches a reserved
    pattern needs an allowed pattern that lies inside that reserved one (the allowed
    pattern itself matches it): `app.kubernetes.io/*` lifts `*.kubernetes.io/*` for the keys
    it matches, `*` lifts nothing."""

    allowed: tuple[str, ...] = ("*",)
    reserved: tuple[str, ...] = ()

    def permits(self, name: str) -> bool:
        allowing = [a for a in self.allowed if fnmatchcase(name, a)]
        if not allowing:
            return False
        return all(
            any(fnmatchcase(a, r) for a in allowing) for r in self.reserved if fnmatchcase(name, r)
        )

    def describe(self) -> str:
        allowed = ", ".join(self.allowed) or "none"
        reserved = ", ".join(self.reserved) or "none"
        return f"allowed {allowed}; reserved {reserved}"


@dataclass(frozen=True)
class JobPolicy:
    """What the cluster admin allows in a profile's spec.job and spec.server (chart values
    `jobPolicy.*`). The defaults are safe: the operator's image and account, no
    `system-*` PriorityClass, no key of the operator, Kubernetes or Kueue, a day at most,
    External servers only behind a Service of the profile's own namespace."""

    # spec.job.image and spec.job.serviceAccountName would let whoever may create an
    # SpsProfile run an image with a Deployment's Secrets and volumes, under any account.
    allowed_images: tuple[str, ...] = ()
    allowed_service_accounts: tuple[str, ...] = ()
    # Kueue queues a Job may name. Empty: the operator's default queue (jobDefaults.labels)
    # if it has one is required, else any queue or none.
    allowed_queues: tuple[str, ...] = ()
    priority_classes: NameRule = NameRule(("*",), ("system-*",))
    label_keys: NameRule = NameRule(ALLOWED_KEYS, RESERVED_KEYS)
    annotation_keys: NameRule = NameRule(ALLOWED_KEYS, RESERVED_KEYS)
    max_active_deadline_seconds: int = 86_400
    # A run's pods (a multi-node clone runs the target's --nnodes) and GPUs per pod.
    max_run_pods: int = 8
    max_gpus_per_pod: int = 16
    # Hosts an External server.url may name; `*` stands for one DNS label (alone: any
    # host), {namespace} for the profile's namespace.
    allowed_server_hosts: tuple[str, ...] = (f"*.{NAMESPACE_PLACEHOLDER}.svc.cluster.local",)

    def queues(self, default_queue: str | None) -> tuple[str, ...]:
        """The queues a Job may name; empty: no queue rule."""
        if self.allowed_queues:
            return self.allowed_queues
        return (default_queue,) if default_queue else ()


@dataclass(frozen=True)
class ServiceInfo:
    """What the Service index keeps per Service."""

    name: str
    selector: Mapping[str, str]
    type: str = "ClusterIP"


def service_info(name: str, spec: Mapping[str, Any]) -> ServiceInfo:
    return ServiceInfo(name, dict(spec.get("selector") or {}), str(spec.get("type") or "ClusterIP"))


def _admin(rule: str, message: str) -> Refusal:
    return Refusal(JOB_POLICY, f"jobPolicy.{rule}", f"{message} (ask the cluster admin)")


def _allowed(value: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(value, p) for p in patterns)


# --------------------------------------------------------------------------- the spec


def spec_refusal(
    policy: JobPolicy,
    spec: SpsProfileSpec,
    *,
    namespace: str,
    profiler_image: str,
    services: Sequence[ServiceInfo] = (),
) -> Refusal | None:
    """What the profile asks for directly: image, account, deadline, keys, server URL."""
    job = spec.job
    if job.image and job.image != profiler_image and not _allowed(job.image, policy.allowed_images):
        return _admin(
            "allowedImages",
            f"spec.job.image {job.image!r} is not allowed (it would run with the target's "
            "volumes and Secrets); remove it to use the operator's own profiler image, or have "
            "it allowed (flag --allow-job-image)",
        )
    account = job.service_account_name
    if account and not _allowed(account, policy.allowed_service_accounts):
        return _admin(
            "allowedServiceAccounts",
            f"spec.job.serviceAccountName {account!r} is not allowed; remove it (each run gets "
            "its own ServiceAccount that may only write its result), or have it allowed (flag "
            "--allow-service-account)",
        )
    return (
        _deadline_refusal(policy, job)
        or _keys_refusal(policy.label_keys, "labelKeys", "labels", job.labels)
        or _keys_refusal(policy.annotation_keys, "annotationKeys", "annotations", job.annotations)
        or _server_refusal(policy, spec, namespace, services)
    )


def _deadline_refusal(policy: JobPolicy, job: JobOverrides) -> Refusal | None:
    limit = policy.max_active_deadline_seconds
    if job.active_deadline_seconds <= limit:
        return None
    given = "active_deadline_seconds" in job.model_fields_set
    which = "spec.job.activeDeadlineSeconds" + ("" if given else " (its default)")
    return _admin(
        "maxActiveDeadlineSeconds",
        f"{which} is {job.active_deadline_seconds} s, more than the {limit} s a profiling Job "
        f"may hold GPUs; set spec.job.activeDeadlineSeconds to at most {limit} (a smaller "
        "sweep, or a wider sweep.ciRelWidth, takes less time)",
    )


def _keys_refusal(
    rule: NameRule, rule_name: str, field_name: str, values: Mapping[str, str] | None
) -> Refusal | None:
    exempt = KUEUE_RULED_LABELS if field_name == "labels" else ()
    refused = sorted(k for k in values or {} if k not in exempt and not rule.permits(k))
    if not refused:
        return None
    return _admin(
        rule_name,
        f"spec.job.{field_name} may not set {', '.join(refused)} ({rule.describe()}); remove "
        "them, or have the keys allowed",
    )


def host_matches(host: str, pattern: str) -> bool:
    """A host name against a pattern, label by label: `*` never spans a dot, so
    `*.team.svc.cluster.local` is a Service of namespace `team`, not `a.other.svc.team...`.
    The pattern `*` alone admits every host."""
    if pattern == "*":
        return True
    labels, wanted = host.split("."), pattern.lower().split(".")
    return len(labels) == len(wanted) and all(map(fnmatchcase, labels, wanted))


def _server_refusal(
    policy: JobPolicy, spec: SpsProfileSpec, namespace: str, services: Sequence[ServiceInfo]
) -> Refusal | None:
    if not spec.server.url:  # the API admits a url with source External only
        return None
    url = spec.server.url
    try:
        parts = urlsplit(url)
        host, _ = parts.hostname, parts.port  # .port raises on a port that is no number
    except ValueError as exc:
        host, bad = None, str(exc)
    else:
        bad = "it names no host"
    if not host:
        return Refusal(JOB_POLICY, "spec.server.url", f"{url!r} is not a usable URL: {bad}")
    forbidden = forbidden_url_address(host)
    if forbidden:
        return Refusal(
            JOB_POLICY,
            "spec.server.url",
            f"a profiler never connects to {forbidden}; point server.url at the DSpark "
            "server's Service",
        )
    patterns = [p.replace(NAMESPACE_PLACEHOLDER, namespace) for p in policy.allowed_server_hosts]
    if not any(host_matches(host, p) for p in patterns):
        return _admin(
            "allowedServerHosts",
            f"spec.server.url host {host!r} is not allowed (allowed: "
            f"{', '.join(patterns) or 'none'}); put the DSpark server behind a Service of this "
            "namespace and use "
            f"http://<service>.{namespace}.svc.cluster.local:<port>, or have the host allowed",
        )
    labels = host.split(".")
    if len(labels) > 2 and labels[1] == namespace and labels[2] == "svc":
        service = next((s for s in services if s.name == labels[0]), None)
        if service is not None and service.type == "ExternalName":
            return Refusal(
                JOB_POLICY,
                "spec.server.url",
                f"Service {service.name} is of type ExternalName: its name can point anywhere, "
                "so it cannot stand for a server of this namespace; use a Service that selects "
                "the DSpark server's pods",
            )
    return None


# --------------------------------------------------------------------------- the built Job


def _pod(job: Mapping[str, Any]) -> tuple[Mapping[str, str], Mapping[str, Any]]:
    template = (job.get("spec") or {}).get("template") or {}
    return (template.get("metadata") or {}).get("labels") or {}, template.get("spec") or {}


def job_refusal(
    policy: JobPolicy,
    job: Mapping[str, Any],
    *,
    spec: SpsProfileSpec,
    default_labels: Mapping[str, str],
    default_priority_class: str | None,
) -> Refusal | None:
    """What the Job carries, wherever it came from (spec.job, the admin's defaults, the
    target's pod spec): its Kueue queue and its priorities."""
    labels, pod = _pod(job)
    own = spec.job.labels or {}
    size = size_refusal(policy, job)
    if size is not None:
        return size

    def source(key: str) -> str:
        return (
            f"spec.job.labels[{key}]" if key in own else f"the operator's jobDefaults.labels[{key}]"
        )

    queues = policy.queues(default_labels.get(L.LABEL_KUEUE_QUEUE))
    if queues:
        queue = labels.get(L.LABEL_KUEUE_QUEUE)
        if not queue or not _allowed(queue, queues):
            named = f"{source(L.LABEL_KUEUE_QUEUE)} is {queue!r}" if queue is not None else (
                f"the Job names no Kueue queue (label {L.LABEL_KUEUE_QUEUE})"
            )  # fmt: skip
            return _admin(
                "allowedQueues",
                f"every profiling Job waits in one of the Kueue queues {', '.join(queues)}, but "
                f"{named}; remove the label from spec.job.labels to use the default queue, or "
                "name an allowed one",
            )
    priority = pod.get("priorityClassName")
    if priority and not policy.priority_classes.permits(str(priority)):
        where = (
            "spec.job.priorityClassName"
            if spec.job.priority_class_name
            else "the operator's jobDefaults.priorityClassName"
            if default_priority_class
            else "the target Deployment's priorityClassName (copied into the clone)"
        )
        return _admin(
            "priorityClasses",
            f"{where} is {priority!r} ({policy.priority_classes.describe()}); set "
            "spec.job.priorityClassName to an allowed PriorityClass",
        )
    max_exec = labels.get(L.LABEL_KUEUE_MAX_EXEC)
    if max_exec is not None:
        seconds = L.max_exec_seconds(labels)
        limit = policy.max_active_deadline_seconds
        said = f"{source(L.LABEL_KUEUE_MAX_EXEC)} is {clean_text(str(max_exec), 64)!r}"
        if seconds is None:
            return Refusal(
                JOB_POLICY,
                source(L.LABEL_KUEUE_MAX_EXEC),
                f"{said}: Kueue's maximum execution time must be a whole number of seconds "
                "of at least 1",
            )
        if seconds > limit:
            return _admin(
                "maxActiveDeadlineSeconds",
                f"{said}, more than the {limit} s a profiling Job may hold GPUs; set it to at "
                f"most {limit}",
            )
    kueue_priority = labels.get(L.LABEL_KUEUE_PRIORITY)
    if kueue_priority and not policy.priority_classes.permits(kueue_priority):
        return _admin(
            "priorityClasses",
            f"{source(L.LABEL_KUEUE_PRIORITY)} is {kueue_priority!r} "
            f"({policy.priority_classes.describe()}); name an allowed WorkloadPriorityClass",
        )
    return None


def size_refusal(policy: JobPolicy, job: Mapping[str, Any]) -> Refusal | None:
    """The admin's bounds on what one run holds: pods (a multi-node clone runs one per
    node of the target's group) and GPUs per pod (the target's request, cloned)."""
    pods, gpus = group_pods(job), pod_gpus(job)
    if pods > policy.max_run_pods:
        return _admin(
            "maxRunPods",
            f"the target is a group of {pods} nodes (--nnodes {pods}), so its profiling clone "
            f"would run {pods} pods at once, more than the {policy.max_run_pods} one run may; "
            "profile it with server.source External against its leader, or have the bound "
            "raised (flag --max-run-pods)",
        )
    if gpus > policy.max_gpus_per_pod:
        return _admin(
            "maxGpusPerPod",
            f"each pod of the profiling clone would hold {gpus} GPUs (the target's request), "
            f"more than the {policy.max_gpus_per_pod} a profiling pod may; profile it with "
            "server.source External, or have the bound raised (flag --max-gpus-per-pod)",
        )
    return None


# --------------------------------------------------------------------------- the GPU pin


def _expression_admits(expr: Mapping[str, Any], value: str) -> bool:
    """A node-selector requirement on the GPU label, for a node whose label is `value`."""
    op, values = expr.get("operator"), [str(v) for v in expr.get("values") or []]
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return True
    if op in ("Gt", "Lt") and value.isdigit() and len(values) == 1 and values[0].isdigit():
        return int(value) > int(values[0]) if op == "Gt" else int(value) < int(values[0])
    return False  # DoesNotExist, or Gt/Lt on a product name


def pin_refusal(
    spec: SpsProfileSpec, job: Mapping[str, Any], gpu_label: str, gpu_product: str
) -> Refusal | None:
    """A Clone Job runs on `gpu_product` (its nodeSelector pins it, and the pin always
    wins); refuse what asks for another product: spec.job.nodeSelector, or a required node
    affinity (the target's, copied into the clone) with no term that admits the product."""
    asked = (spec.job.node_selector or {}).get(gpu_label)
    if asked is not None and asked != gpu_product:
        return Refusal(
            GPU_PIN_CONFLICT,
            "spec.job.nodeSelector",
            f"{gpu_label}={asked} contradicts the GPU product the table is for ({gpu_product}, "
            "where the target's pods run): a table measured on one product is wrong for "
            f"another. Remove {gpu_label} from spec.job.nodeSelector",
        )
    _, pod = _pod(job)
    required = (((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {})  # fmt: skip
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return None
    if any(
        all(
            _expression_admits(e, gpu_product)
            for e in term.get("matchExpressions") or []
            if e.get("key") == gpu_label
        )
        for term in terms
    ):
        return None
    return Refusal(
        GPU_PIN_CONFLICT,
        "affinity",
        f"the target Deployment's required node affinity admits no node with {gpu_label}="
        f"{gpu_product}, the product its pods run on and the table is for; the clone cannot "
        "run there. If the Deployment is moving to another GPU product, the run starts once "
        "its pods have moved; otherwise make its node affinity agree with where it runs",
    )


# --------------------------------------------------------------------------- pod selectors


@dataclass(frozen=True)
class PodSelector:
    """Something that selects pods in the namespace (a Deployment, a Service, a PDB)."""

    kind: str
    name: str
    selector: Mapping[str, Any]  # metav1.LabelSelector


def pod_selectors(
    deployments: Iterable[Mapping[str, Any]],
    services: Iterable[ServiceInfo],
    pdbs: Iterable[Mapping[str, Any]],
) -> list[PodSelector]:
    def selector(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        return (obj.get("spec") or {}).get("selector") or {}

    out = [PodSelector("Deployment", str(d["metadata"]["name"]), selector(d)) for d in deployments]
    out += [PodSelector("Service", s.name, {"matchLabels": dict(s.selector)}) for s in services]
    out += [
        PodSelector("PodDisruptionBudget", str(b["metadata"]["name"]), selector(b)) for b in pdbs
    ]
    return out


def selector_refusal(
    pod_labels: Mapping[str, str],
    operator_labels: Mapping[str, str],
    selectors: Iterable[PodSelector],
) -> Refusal | None:
    """The profiling pod must never pass for a server pod: a Service would send it user
    traffic, a Deployment's selector (placement, an HPA) or a PodDisruptionBudget would
    count it as a replica. Refused when the labels added to the operator's own
    (spec.job.labels, the admin's jobDefaults.labels) make a selector match."""
    added = sorted(k for k in pod_labels if operator_labels.get(k) != pod_labels[k])
    for s in selectors:
        if matches_selector(s.selector, pod_labels) and not matches_selector(
            s.selector, operator_labels
        ):
            return Refusal(
                JOB_LABELS_SELECT_PODS,
                "spec.job.labels",
                f"the profiling pod's labels ({', '.join(added)}) match the selector of "
                f"{s.kind} {s.name}: it would {_consequence(s.kind)}. Remove or rename those "
                "labels in spec.job.labels",
            )
    return None


def _consequence(kind: str) -> str:
    if kind == "Service":
        return "send user traffic to the profiling server"
    if kind == "PodDisruptionBudget":
        return "count the profiling pod as a healthy replica and allow a real one to be evicted"
    return "pass for one of that Deployment's replicas (its GPU product, its autoscaler)"
