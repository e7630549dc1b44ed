"""A test bed for reconcile passes: profiles, Deployments and pods in a `FakeKube`, a
settable clock, and helpers that play the profiling Job's part."""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from api_snapshot import api_snapshot
from fakekube import FakeKube

from sps_operator.api import labels as L
from sps_operator.api.kinds import RunPhase
from sps_operator.api.legacy_tables import without_v1_twins
from sps_operator.api.result import build_patch
from sps_operator.controller import indexes as ix
from sps_operator.controller.kube import names
from sps_operator.controller.passes.state import Settings
from sps_operator.controller.policies import workloads
from sps_operator.controller.policies.claims import claim_info
from sps_operator.controller.policies.deployments import deployment_rolled_out
from sps_operator.controller.policies.placement import PodInfo
from sps_operator.controller.policies.selectors import matches_selector
from sps_operator.controller.reconcile.reconciler import Reconciler

NS = "serving"
H100, H200 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"
NODES = {"n1": {"nvidia.com/gpu.product": H100}, "n2": {"nvidia.com/gpu.product": H200}}
SERVER_ARGS = [
    "--model-path",
    "org/model-8b",
    "--speculative-algorithm",
    "DSPARK",
    "--speculative-dspark-block-size",
    "3",
    "--port",
    "30000",
]


def container(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "sglang",
        "image": "lmsysorg/sglang:v1",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": list(SERVER_ARGS),
    }
    base.update(changes)
    return base


def deployment(
    name: str = "server", labels: dict[str, str] | None = None, **container_changes: Any
) -> dict[str, Any]:
    pod_labels = {"app": "sglang", "deploy": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": labels or {"app": "sglang"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": pod_labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {"containers": [container(**container_changes)]},
            },
        },
        "status": {
            "observedGeneration": 1,
            "replicas": 1,
            "updatedReplicas": 1,
            "availableReplicas": 1,
        },
    }


def profile_body(name: str = "p", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "sglang"}},
        "table": {"kind": "Diagonal", "sweep": {"batchSizes": [1, 2, 4], "repeats": 2}},
    }
    body.update(spec)
    return {
        "apiVersion": "sps.dev/v1alpha1",
        "kind": "SpsProfile",
        "metadata": {"name": name, "namespace": NS, "generation": 1},
        "spec": body,
    }


def rounds(
    scale: float = 1.0, noise: float = 0.0, batch_sizes: tuple[int, ...] = (1, 2, 4), k: int = 4
) -> list[dict[str, Any]]:
    out = []
    for repeat in (0, 1):
        for bs in batch_sizes:
            t = (0.010 + 0.001 * bs) * scale * (1 + (noise if repeat else -noise))
            out.append(
                {
                    "repeat": repeat,
                    "batch_size": bs,
                    "batch_size_per_rank": bs,
                    "frac": None,
                    "batch_tokens": bs * k,
                    "steps_per_sec": 1.0 / t,
                }
            )
    return out


def additive_rounds(fracs: tuple[float, ...] = (0.25, 0.5, 1.0)) -> list[dict[str, Any]]:
    out = []
    for bs in (1, 2, 4):
        for frac in fracs:
            m = min(bs + int(frac * (bs * 3)), bs * 4)
            out.append(
                {
                    "repeat": 0,
                    "batch_size": bs,
                    "batch_size_per_rank": bs,
                    "frac": frac,
                    "batch_tokens": m,
                    "steps_per_sec": 1.0 / (0.010 + 0.0005 * bs + 0.0002 * m),
                }
            )
    return out


@dataclass
class Harness:
    kube: FakeKube = field(default_factory=FakeKube)
    now: datetime = field(default_factory=lambda: datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC))
    settings: Settings = field(
        default_factory=lambda: Settings(gpu_debounce_seconds=0, isolate_fits=False)
    )
    pods: list[PodInfo] = field(default_factory=list)
    reconciler: Reconciler | None = None
    # The kubelet's part: the pods of a Deployment whose rollout completed carry its
    # template's table hash. Off for a test that sets the pods' hashes itself.
    pods_follow_templates: bool = True

    def __post_init__(self) -> None:
        self.reconciler = Reconciler(self.kube, self.settings, clock=lambda: self.now)

    @classmethod
    def one_target(cls, settings: Settings | None = None, **spec: Any) -> Harness:
        """One SGLang Deployment on H100, selected by profile "p"."""
        h = cls(settings=settings) if settings is not None else cls()
        h.add(deployment())
        h.add(profile_body(**spec))
        h.place()
        return h

    @classmethod
    def with_finished_job(cls, **spec: Any) -> Harness:
        """`one_target` whose first run's Job has completed with a good result, not yet
        collected."""
        h = cls.one_target(**spec)
        h.tick()
        h.run_pass()
        h.finish()
        return h

    # ---- the world

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.kube.put(copy.deepcopy(obj))

    def place(self, deployment: str = "server", node: str = "n1", count: int = 1) -> None:
        self.pods = [p for p in self.pods if p.labels.get("deploy") != deployment]
        for i in range(count):
            labels = {"app": "sglang", "deploy": deployment}
            self.pods.append(PodInfo(f"{deployment}-{i}", labels, node, ready=True))

    def tick(self, seconds: float = 1.0) -> None:
        self.now += timedelta(seconds=seconds)

    # ---- passes

    def pods_now(self) -> list[PodInfo]:
        """The pods as a pass sees them (see `pods_follow_templates`)."""
        if not self.pods_follow_templates:
            return list(self.pods)
        out = []
        for pod in self.pods:
            dep = next(
                (
                    d
                    for kind in workloads.KINDS
                    for d in self.kube.kinds(kind)
                    if matches_selector(workloads.pod_selector(d) or {}, pod.labels)
                ),
                None,
            )
            if dep is not None and deployment_rolled_out(dep):
                # A LeaderWorkerSet's worker (index > 0) runs the worker template.
                found = workloads.templates(dep)
                worker = pod.labels.get(workloads.LWS_WORKER_INDEX_LABEL, "0") != "0"
                template = found[-1][1] if worker else found[0][1]
                annotations = (template.get("metadata") or {}).get("annotations")
                pod = dataclasses.replace(
                    pod, table_hash=(annotations or {}).get("sps.dev/table-hash")
                )
            out.append(pod)
        return out

    def run_pass(self, name: str = "p") -> dict[str, Any]:
        assert self.reconciler is not None
        body = copy.deepcopy(self.kube.obj("SpsProfile", name, NS))
        claims = [
            claim_info(c["metadata"]["name"], c.get("spec") or {}, c.get("status") or {})
            for c in self.kube.kinds("PersistentVolumeClaim")
        ]
        by_name = {c.name: c for c in claims}
        # Read inside the pass, as the pass reads: an API error there is the pass's.
        pods = self.pods_now()
        self.reconciler.reconcile(body, lambda: api_snapshot(self.kube, body, pods, NODES, by_name))
        return self.status(name)

    def cluster_objects(self) -> list[dict[str, Any]]:
        """Every object, with the pods and nodes as the API would hold them."""
        objects = [o for _, o in sorted(self.kube.objects.items())]
        for pod in self.pods:
            meta: dict[str, Any] = {"name": pod.name, "namespace": NS, "labels": dict(pod.labels)}
            spec: dict[str, Any] = {"nodeName": pod.node} if pod.node else {}
            status: dict[str, Any] = {"phase": pod.phase or "Running"}
            if pod.created:
                meta["creationTimestamp"] = pod.created
            if pod.controller:
                meta["ownerReferences"] = [{"kind": pod.controller, "controller": True}]
                if pod.controller_uid:
                    meta["ownerReferences"][0]["uid"] = pod.controller_uid
            if pod.priority is not None:
                spec["priority"] = pod.priority
            if pod.priority_class:
                spec["priorityClassName"] = pod.priority_class
            if pod.unschedulable:
                status["phase"] = "Pending"
                status["conditions"] = [{"type": "PodScheduled", "status": "False",
                                         "message": pod.unschedulable}]  # fmt: skip
            objects.append({"kind": "Pod", "metadata": meta, "spec": spec, "status": status})
        objects += [
            {"kind": "Node", "metadata": {"name": n, "labels": dict(labels)}}
            for n, labels in NODES.items()
        ]
        return objects

    def run_cached_pass(self, name: str = "p", namespace: str = NS) -> dict[str, Any]:
        """A pass as the operator runs it: on what its kopf indexes hold (every namespace's
        objects through the same index functions), not on LISTs of one namespace."""
        assert self.reconciler is not None
        body = copy.deepcopy(self.kube.obj("SpsProfile", name, namespace))
        world = ix.world_for(body, indexes_of(self.cluster_objects()))
        self.reconciler.reconcile(body, world)
        return self.status(name, namespace)

    def settle(self, name: str = "p", passes: int = 3) -> dict[str, Any]:
        for _ in range(passes):
            self.tick()
            self.run_pass(name)
        return self.status(name)

    def status(self, name: str = "p", namespace: str = NS) -> dict[str, Any]:
        """The status as the operator and `kubectl sps` read it: `tables` without the
        entries listed for 0.1.0 (api/legacy_tables.py; `stored_status` has them)."""
        status = self.stored_status(name, namespace)
        if "tables" in status:
            status["tables"] = without_v1_twins(status["tables"])
        return status

    def stored_status(self, name: str = "p", namespace: str = NS) -> dict[str, Any]:
        """The status as written, with the version-1 twins (what 0.1.0 reads)."""
        return copy.deepcopy(self.kube.obj("SpsProfile", name, namespace).get("status") or {})

    def condition(self, type_: str, name: str = "p") -> tuple[str, str, str]:
        c = next(c for c in self.status(name).get("conditions") or [] if c["type"] == type_)
        return c["status"], c["reason"], c.get("message", "")

    # ---- the Job's part

    def finish(
        self,
        name: str = "p",
        result: dict[str, Any] | None = None,
        ok: bool = True,
        phase: RunPhase = RunPhase.DIAGONAL,
    ) -> None:
        """Complete the current run's Job with `result` (a build_patch or raw data)."""
        run = self.status(name)["currentRun"]
        job = self.kube.obj("Job", run["job"], NS)
        job["status"] = {"conditions": [{"type": "Complete" if ok else "Failed", "status": "True"}]}
        cm = self.kube.obj("ConfigMap", names.result_config_map(run["name"], phase), NS)
        result = result if result is not None else build_patch(status="succeeded", rounds=rounds())
        cm["data"] = {k: v for k, v in (result.get("data") or {}).items() if v is not None}
        binary = {k: v for k, v in (result.get("binaryData") or {}).items() if v is not None}
        if binary:
            cm["binaryData"] = binary

    def profile_once(self, name: str = "p", result: dict[str, Any] | None = None) -> dict[str, Any]:
        """Pass → Job → result → pass: one whole run; returns the status after."""
        self.tick()
        self.run_pass(name)
        assert self.status(name).get("currentRun"), self.status(name)
        self.finish(name, result)
        return self.settle(name)

    def template(self, deployment: str = "server") -> dict[str, Any]:
        return self.kube.obj("Deployment", deployment, NS)["spec"]["template"]

    def running_hash(self, deployment: str = "server") -> str | None:
        annotations = (self.template(deployment).get("metadata") or {}).get("annotations") or {}
        return annotations.get("sps.dev/table-hash")

    def table_json(self, config_map: str) -> dict[str, Any]:
        return dict(json.loads(self.kube.obj("ConfigMap", config_map, NS)["data"]["table.json"]))


# --------------------------------------------------------------------------- the caches


# What each kopf index of handlers.py watches: (kind, its filter, its entries function).
def _ours(obj: dict[str, Any]) -> bool:
    return (obj["metadata"].get("labels") or {}).get(L.LABEL_MANAGED_BY) == L.MANAGED_BY


def _borrowing(obj: dict[str, Any]) -> bool:
    return L.ANNOTATION_BORROWED in (obj["metadata"].get("annotations") or {})


INDEXED: dict[str, tuple[Any, Any, Any]] = {
    "deployments": (tuple(workloads.KINDS), None, ix.deployment_entries),
    "borrowed": ("Deployment", _borrowing, ix.borrowed_entries),
    "jobs": ("Job", _ours, ix.job_entries),
    "config_maps": ("ConfigMap", _ours, ix.config_map_entries),
    "profiles": ("SpsProfile", None, ix.profile_entries),
    "pods": ("Pod", None, ix.pod_entries),
    "node_labels": ("Node", None, ix.node_entries),
    "pdbs": ("PodDisruptionBudget", None, ix.pdb_entries),
    "hpas": ("HorizontalPodAutoscaler", None, ix.hpa_entries),
    "services": ("Service", None, ix.service_entries),
    "claims": ("PersistentVolumeClaim", None, ix.claim_entries),
}


def indexes_of(objects: list[dict[str, Any]]) -> ix.Indexes:
    """The operator's kopf indexes over `objects` (of every namespace), built with the same
    entries functions kopf calls (key → values, in the order given)."""
    built: dict[str, dict[Any, list[Any]]] = {name: {} for name in INDEXED}
    for obj in objects:
        kind = obj["kind"]
        for name, (indexed_kind, wanted, entries) in INDEXED.items():
            kinds = indexed_kind if isinstance(indexed_kind, tuple) else (indexed_kind,)
            if kind not in kinds or (wanted is not None and not wanted(obj)):
                continue
            made = entries(copy.deepcopy(obj), kind) if name == "deployments" else None
            for key, value in (made or entries(copy.deepcopy(obj))).items():
                built[name].setdefault(key, []).append(value)
    return ix.Indexes(**built)


def started(h: Harness, name: str = "p") -> dict[str, Any]:
    """One pass that starts a run; the run."""
    h.tick()
    h.run_pass(name)
    run = h.status(name)["currentRun"]
    assert run, h.status(name)
    return dict(run)
