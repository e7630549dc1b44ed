"""Kueue in the test bed, run the way a user's cluster runs it.

The manager (built by `testbed/recipes/build-kueue.sh` at the pin in
`testbed/recipes/kueue/go.mod`) runs as the Deployment `kueue-controller-manager` in
`kueue-system`, from an image of that binary (`testbed/images/build.sh`), installed from the
same module's `config/default` as `kubectl kustomize` renders it: the CRDs, RBAC, the
mutating and validating webhooks, the visibility API (an APIService) and the manager's
ConfigMap, all as shipped. Kueue's internal certificate management creates the webhook
serving certificate in the Secret `kueue-webhook-server-cert` and patches the caBundle of
its webhook configurations and CRD conversion webhooks; nothing here makes certificates.

Then the queues for the bed's GPUs (queue_manifests):

- a ResourceFlavor per GPU product of the nodes (`nodeLabels: nvidia.com/gpu.product`), so an
  admitted workload's pods are sent to that product;
- the ClusterQueue `gpu`: per flavor, a quota of `nvidia.com/gpu` equal to the GPUs of that
  product, and cpu/memory (every resource a pod requests must be covered; GPUs are what is
  scarce, so these are generous); lower-priority workloads are preempted within it;
- the WorkloadPriorityClasses `high` and `low`.

A namespace then needs only a LocalQueue pointing at `gpu` (create_local_queue).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sps_operator.constants import GPU_PRODUCT_LABEL, GPU_RESOURCE
from sps_testbed import addon
from sps_testbed.addon import FIELD_MANAGER, condition, deployment_available, manager_state, poll
from sps_testbed.addon import NOT_YET as _NOT_YET
from sps_testbed.addon import Bed as _Bed
from sps_testbed.addon import dump as _dump
from sps_testbed.addon import get_json as _get
from sps_testbed.controlplane import NodeSpec

NAMESPACE = "kueue-system"
DEPLOYMENT = "kueue-controller-manager"
CONTAINER = "manager"
API_VERSION = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "gpu"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
PRIORITY_CLASSES = {"high": 1000, "low": 100}
# The bed's nodes all report the host's CPUs and memory; only GPUs are meant to be scarce.
CPU_QUOTA = "1000"
MEMORY_QUOTA = "4Ti"
# The shipped Deployment reserves 500m; the bed's nodes share two cores, so it asks for less.
MANAGER_CPU_REQUEST = "100m"
# The shipped readiness probe (first after 5 s, then every 10 s) leaves a ready manager
# unnoticed for up to 10 s; every `make test` waits for it, so the bed probes every second.
MANAGER_READINESS_PERIOD_SECONDS = 1


class KueueError(RuntimeError):
    """Kueue did not install, configure or uninstall; the message says what it saw."""


@dataclass(frozen=True)
class KueueSetup:
    """What `install` set up, for tests and the CLI to refer to."""

    version: str
    image: str
    cluster_queue: str
    flavors: dict[str, str]  # GPU product -> ResourceFlavor name
    priority_classes: dict[str, int]
    timings: dict[str, float]  # seconds since the install began


def flavor_name(product: str) -> str:
    """The ResourceFlavor of a GPU product: `NVIDIA-H100-80GB-HBM3` -> `nvidia-h100-80gb-hbm3`."""
    name = re.sub(r"[^a-z0-9]+", "-", product.lower()).strip("-")[:63].strip("-")
    if not name:
        raise ValueError(f"GPU product {product!r} gives no ResourceFlavor name")
    return name


def bed_manifests(rendered: str, image: str) -> list[dict[str, Any]]:
    """Kueue's rendered config/default, with the manager running `image` (the release's
    name, which the nodes pull from the bed's registry, instead of the staging name
    config/ carries), a smaller CPU request and a readiness probe that looks every second
    (the same check, the same endpoint); everything else as shipped."""
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    for doc in docs:
        meta = doc.get("metadata") or {}
        if doc.get("kind") != "Deployment" or meta.get("name") != DEPLOYMENT:
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            if container.get("name") == CONTAINER:
                container["image"] = image
                requests = container.setdefault("resources", {}).setdefault("requests", {})
                requests["cpu"] = MANAGER_CPU_REQUEST
                probe = container.get("readinessProbe")
                if probe:
                    probe["initialDelaySeconds"] = 0
                    probe["periodSeconds"] = MANAGER_READINESS_PERIOD_SECONDS
                return docs
    raise KueueError(
        f"no Deployment {DEPLOYMENT} with a container {CONTAINER!r} in Kueue's rendered "
        "config/default; has the pinned version changed its layout?"
    )


def cluster_queue_manifest(name: str, gpus: dict[str, int]) -> dict[str, Any]:
    """A ClusterQueue `name` of every namespace: per GPU product, its flavor with a quota of
    `gpus[product]` GPUs (and generous cpu/memory)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},  # every namespace (null would be none)
            "queueingStrategy": "BestEffortFIFO",
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", GPU_RESOURCE],
                    "flavors": [
                        {
                            "name": flavor_name(product),
                            "resources": [
                                {"name": "cpu", "nominalQuota": CPU_QUOTA},
                                {"name": "memory", "nominalQuota": MEMORY_QUOTA},
                                {"name": GPU_RESOURCE, "nominalQuota": count},
                            ],
                        }
                        for product, count in gpus.items()
                    ],
                }
            ],
        },
    }


def queue_manifests(nodes: Sequence[NodeSpec]) -> list[dict[str, Any]]:
    """ResourceFlavors per GPU product, the ClusterQueue `gpu` and the priority classes."""
    gpus: dict[str, int] = {}
    for node in nodes:
        gpus[node.product] = gpus.get(node.product, 0) + node.gpus
    if not gpus:
        raise ValueError("a Kueue set-up needs at least one node")
    flavors: list[dict[str, Any]] = [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor_name(product)},
            "spec": {"nodeLabels": {GPU_PRODUCT_LABEL: product}},
        }
        for product in gpus
    ]
    cluster_queue = cluster_queue_manifest(CLUSTER_QUEUE, gpus)
    priorities = [
        {
            "apiVersion": API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": name},
            "value": value,
            "description": f"sps-testbed: {name} priority",
        }
        for name, value in PRIORITY_CLASSES.items()
    ]
    return [*flavors, cluster_queue, *priorities]


def local_queue(
    namespace: str, name: str = CLUSTER_QUEUE, cluster_queue: str = CLUSTER_QUEUE
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }


def _poll(what: str, check: Callable[[], Any], timeout: float, detail: Callable[[], str]) -> Any:
    return poll(what, check, timeout, detail, KueueError)


def _manager_state(bed: _Bed) -> str:
    return manager_state(bed, NAMESPACE, DEPLOYMENT)


def _available(bed: _Bed) -> bool:
    return deployment_available(bed, NAMESPACE, DEPLOYMENT)


def _apply_when_served(bed: _Bed, docs: Sequence[dict[str, Any]], timeout: float) -> None:
    """Apply objects that Kueue's webhooks admit, retrying while they are not serving yet
    (endpoints, kube-proxy rules and the caBundle arrive a moment after the pod is Ready)."""
    deadline = time.monotonic() + timeout
    while True:
        proc_err = ""
        try:
            bed.kubectl(
                "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", "-",
                input=_dump(docs),
            )  # fmt: skip
            return
        except RuntimeError as err:  # KubectlError
            proc_err = str(err)
        if not any(s in proc_err for s in _NOT_YET) or time.monotonic() > deadline:
            raise KueueError(f"applying the Kueue queues failed: {proc_err}\n{_manager_state(bed)}")
        time.sleep(1.0)


def install(
    bed: _Bed,
    kueue_dir: Path,
    image: str,
    nodes: Sequence[NodeSpec],
    timeout: float = 300.0,
) -> KueueSetup:
    """Install Kueue and the bed's queues; return once its webhooks admit objects, the
    ClusterQueue is Active and the visibility API is Available. Idempotent."""
    t0 = time.monotonic()
    timings: dict[str, float] = {}

    def mark(what: str) -> None:
        timings[what] = round(time.monotonic() - t0, 2)

    manifests = bed_manifests((kueue_dir / "kueue.yaml").read_text(), image)
    # Server-side: the CRDs are too big for the last-applied annotation.
    bed.kubectl(
        "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
        "-f", "-", input=_dump(manifests), timeout=180,
    )  # fmt: skip
    mark("applied")
    deadline = t0 + timeout
    _poll(
        f"Deployment {NAMESPACE}/{DEPLOYMENT} available",
        lambda: _available(bed),
        deadline - time.monotonic(),
        lambda: _manager_state(bed),
    )
    mark("manager_available")
    _apply_when_served(bed, queue_manifests(nodes), deadline - time.monotonic())
    mark("webhooks_serving")

    def cluster_queue_active() -> bool:
        cq = _get(bed, "clusterqueues.kueue.x-k8s.io", CLUSTER_QUEUE)
        return condition(cq, "Active").get("status") == "True"

    _poll(
        f"ClusterQueue {CLUSTER_QUEUE} Active",
        cluster_queue_active,
        deadline - time.monotonic(),
        lambda: bed.kubectl("describe", "clusterqueue", CLUSTER_QUEUE, check=False),
    )
    mark("cluster_queue_active")
    # An unavailable aggregated API breaks discovery, and with it namespace deletion.
    services = [d["metadata"]["name"] for d in manifests if d.get("kind") == "APIService"]

    def visibility_available() -> bool:
        return all(
            condition(_get(bed, "apiservice", name), "Available").get("status") == "True"
            for name in services
        )

    _poll(
        "Kueue's visibility API Available",
        visibility_available,
        deadline - time.monotonic(),
        lambda: bed.kubectl("get", "apiservice", *services, "-o", "yaml", check=False),
    )
    mark("visibility_available")
    products = dict.fromkeys(n.product for n in nodes)
    return KueueSetup(
        version=(kueue_dir / "version").read_text().strip(),
        image=image,
        cluster_queue=CLUSTER_QUEUE,
        flavors={p: flavor_name(p) for p in products},
        priority_classes=dict(PRIORITY_CLASSES),
        timings=timings,
    )


def create_local_queue(
    bed: _Bed, namespace: str, name: str = CLUSTER_QUEUE, cluster_queue: str = CLUSTER_QUEUE
) -> str:
    """A LocalQueue `name` in `namespace` pointing at `cluster_queue`, once Active."""
    manifest = local_queue(namespace, name, cluster_queue)
    bed.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    _poll(
        f"LocalQueue {namespace}/{name} Active",
        lambda: (
            condition(_get(bed, "localqueues.kueue.x-k8s.io", name, "-n", namespace), "Active").get(
                "status"
            )
            == "True"
        ),
        60,
        lambda: bed.kubectl("describe", "localqueue", name, "-n", namespace, check=False),
    )
    return name


def uninstall(bed: _Bed, kueue_dir: Path, timeout: float = 180.0) -> None:
    """Remove Kueue and everything of it (sps_testbed.addon.uninstall), its aggregated API
    among what goes first."""
    addon.uninstall(
        bed, kueue_dir / "kueue.yaml", NAMESPACE, title="Kueue",
        callers=(*addon.WEBHOOK_CALLERS, "APIService"),
        left_kinds=("crd", "apiservice", "mutatingwebhookconfiguration",
                    "validatingwebhookconfiguration", "namespace"),
        own=lambda name: name.endswith(".kueue.x-k8s.io")
        or name.split("/")[-1].startswith("kueue-"),
        error=KueueError, timeout=timeout,
    )  # fmt: skip
