"""LeaderWorkerSet in the test bed, run the way a user's cluster runs it, as Kueue is
(sps_testbed.kueue).

The manager (built by `testbed/recipes/build-lws.sh` at the pin in
`testbed/recipes/lws/go.mod`) runs as the Deployment `lws-controller-manager` in
`lws-system`, from an image of that binary (`testbed/images/build.sh`), installed from the
same module's `config/default` as `kubectl kustomize` renders it: the CRDs, RBAC, the
mutating and validating webhooks (for LeaderWorkerSets, and for the pods of one: labels,
`LWS_LEADER_ADDRESS`, `LWS_WORKER_INDEX`) and the manager's ConfigMap, all as shipped, but
one replica (the shipped two each reserve a whole CPU; the bed's nodes share two).
LWS's internal certificate management (`internalCertManagement` in that ConfigMap) creates
the webhook serving certificate in the Secret `lws-webhook-server-cert` and patches the
caBundle of its webhook configurations; nothing here makes certificates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sps_testbed import addon
from sps_testbed.addon import (
    FIELD_MANAGER,
    NOT_YET,
    Bed,
    deployment_available,
    dump,
    manager_state,
    poll,
)

NAMESPACE = "lws-system"
DEPLOYMENT = "lws-controller-manager"
CONTAINER = "manager"
API_VERSION = "leaderworkerset.x-k8s.io/v1"
CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
WEBHOOK_SECRET = "lws-webhook-server-cert"
# What LWS's pod webhook puts on the pods of a group (sigs.k8s.io/lws/api/.../v1).
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
MANAGER_REPLICAS = 1
MANAGER_CPU_REQUEST = "100m"
# As Kueue's: the shipped probe (after 5 s, then every 10 s) would leave a ready manager
# unnoticed for up to 10 s.
MANAGER_READINESS_PERIOD_SECONDS = 1
# The object install() creates with --dry-run=server to see the webhooks serve (nothing
# is stored): the defaulting webhook sets the subdomain policy, the CRD does not.
_PROBE_NAME = "sps-testbed-webhook-probe"


class LwsError(RuntimeError):
    """LeaderWorkerSet did not install or uninstall; the message says what it saw."""


@dataclass(frozen=True)
class LwsSetup:
    """What `install` set up, for tests and the CLI to refer to."""

    version: str
    image: str
    timings: dict[str, float]  # seconds since the install began


def bed_manifests(rendered: str, image: str) -> list[dict[str, Any]]:
    """LWS's rendered config/default, with the manager running `image` (the release's name,
    which the nodes pull from the bed's registry, instead of the staging name config/
    carries), one replica, a smaller CPU request and a readiness probe that looks every
    second (the same check, the same endpoint); everything else as shipped."""
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    for doc in docs:
        meta = doc.get("metadata") or {}
        if doc.get("kind") != "Deployment" or meta.get("name") != DEPLOYMENT:
            continue
        doc["spec"]["replicas"] = MANAGER_REPLICAS
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
    raise LwsError(
        f"no Deployment {DEPLOYMENT} with a container {CONTAINER!r} in LeaderWorkerSet's "
        "rendered config/default; has the pinned version changed its layout?"
    )


def probe_manifest(namespace: str = NAMESPACE) -> dict[str, Any]:
    """The smallest LeaderWorkerSet: one group of one pod (never stored: dry run)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": _PROBE_NAME, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 1,
                "workerTemplate": {
                    "spec": {
                        "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]
                    }
                },
            },
        },
    }


def defaulted_by_webhook(obj: dict[str, Any]) -> bool:
    """Whether LWS's defaulting webhook saw `obj` (it sets the subdomain policy)."""
    network = (obj.get("spec") or {}).get("networkConfig") or {}
    return bool(network.get("subdomainPolicy"))


def _poll(what: str, check: Callable[[], Any], timeout: float, detail: Callable[[], str]) -> Any:
    return poll(what, check, timeout, detail, LwsError)


def _webhooks_serving(bed: Bed, timeout: float) -> dict[str, Any]:
    """The probe LeaderWorkerSet as the API server would store it, once both of LWS's
    webhooks for it answer (endpoints, kube-proxy rules and the caBundle arrive a moment
    after the pod is Ready)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            out = bed.kubectl(
                "create", "--dry-run=server", "-o", "json", "-f", "-",
                input=json.dumps(probe_manifest()),
            )  # fmt: skip
            obj = dict(json.loads(out))
            if defaulted_by_webhook(obj):
                return obj
            err = f"created without LWS's defaults (is its mutating webhook installed?): {out}"
        except RuntimeError as exc:  # KubectlError
            err = str(exc)
            if not any(s in err for s in NOT_YET):
                raise LwsError(
                    f"LWS's webhooks refused a LeaderWorkerSet: {err}\n"
                    f"{manager_state(bed, NAMESPACE, DEPLOYMENT)}"
                ) from exc
        if time.monotonic() > deadline:
            raise LwsError(
                f"LWS's webhooks not serving within {timeout:.0f}s: {err}\n"
                f"{manager_state(bed, NAMESPACE, DEPLOYMENT)}"
            )
        time.sleep(1.0)


def install(bed: Bed, lws_dir: Path, image: str, timeout: float = 300.0) -> LwsSetup:
    """Install LeaderWorkerSet; return once its webhooks default and admit a
    LeaderWorkerSet. Idempotent."""
    t0 = time.monotonic()
    timings: dict[str, float] = {}

    def mark(what: str) -> None:
        timings[what] = round(time.monotonic() - t0, 2)

    manifests = bed_manifests((lws_dir / "lws.yaml").read_text(), image)
    # Server-side: the CRDs are too big for the last-applied annotation.
    bed.kubectl(
        "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
        "-f", "-", input=dump(manifests), timeout=180,
    )  # fmt: skip
    mark("applied")
    deadline = t0 + timeout
    _poll(
        f"Deployment {NAMESPACE}/{DEPLOYMENT} available",
        lambda: deployment_available(bed, NAMESPACE, DEPLOYMENT),
        deadline - time.monotonic(),
        lambda: manager_state(bed, NAMESPACE, DEPLOYMENT),
    )
    mark("manager_available")
    _webhooks_serving(bed, deadline - time.monotonic())
    mark("webhooks_serving")
    return LwsSetup(version=(lws_dir / "version").read_text().strip(), image=image, timings=timings)


def uninstall(bed: Bed, lws_dir: Path, timeout: float = 180.0) -> None:
    """Remove LeaderWorkerSet and everything of it (sps_testbed.addon.uninstall)."""
    addon.uninstall(
        bed, lws_dir / "lws.yaml", NAMESPACE, title="LeaderWorkerSet",
        left_kinds=("crd", "mutatingwebhookconfiguration", "validatingwebhookconfiguration",
                    "namespace", "clusterrole", "clusterrolebinding"),
        own=lambda name: name.endswith(".leaderworkerset.x-k8s.io")
        or name.endswith(".disaggregatedset.x-k8s.io")
        or name.split("/")[-1].startswith("lws-"),
        error=LwsError, timeout=timeout,
    )  # fmt: skip
