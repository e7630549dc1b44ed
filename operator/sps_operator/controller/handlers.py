"""kopf wiring (thin). Only low-level handlers touch Pods and Nodes (indexes: no
annotations, no API call per event); the SpsProfile gets a resync timer and a deletion
handler. Everything else is in `reconcile.py`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

import kopf

from sps_operator.constants import API_GROUP, API_VERSION, PLURAL
from sps_operator.controller.kube import api_error_detail
from sps_operator.controller.placement import PodInfo
from sps_operator.controller.reconcile import Reconciler
from sps_operator.controller.release import release

log = logging.getLogger("sps_operator.handlers")


def _node_labels(index: Any) -> dict[str, Mapping[str, str]]:
    out: dict[str, Mapping[str, str]] = {}
    for name, store in index.items():
        for labels in store:
            out[name] = labels
    return out


def register(registry: kopf.OperatorRegistry, reconciler: Reconciler, resync: float) -> None:
    lock = threading.Lock()

    @kopf.index("", "v1", "nodes", id="sps_node_labels", registry=registry)
    def sps_node_labels(name: str, labels: Mapping[str, str], **_: Any) -> dict[str, Any]:
        return {name: dict(labels)}

    @kopf.index("", "v1", "pods", id="sps_pods", registry=registry)  # type: ignore[arg-type]
    def sps_pods(
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        spec: Mapping[str, Any],
        status: Mapping[str, Any],
        meta: Mapping[str, Any],
        **_: Any,
    ) -> dict[str, Any]:
        return {
            namespace: PodInfo(
                name=name,
                labels=dict(labels),
                node=spec.get("nodeName"),
                deleting=bool(meta.get("deletionTimestamp")),
                phase=status.get("phase"),
            )
        }

    @kopf.timer(  # type: ignore[arg-type]
        API_GROUP,
        API_VERSION,
        PLURAL,
        id="sps_resync",
        interval=resync,
        backoff=resync,
        registry=registry,
    )
    def sps_resync(
        body: kopf.Body, namespace: str, sps_node_labels: Any, sps_pods: Any, **_: Any
    ) -> None:
        pods = list(sps_pods.get(namespace, []))
        nodes = _node_labels(sps_node_labels)
        with lock:
            reconciler.reconcile(dict(body), pods, nodes)

    @kopf.on.delete(API_GROUP, API_VERSION, PLURAL, id="sps_release", registry=registry)  # type: ignore[arg-type]
    def sps_release(namespace: str, name: str, uid: str, **_: Any) -> None:
        """Keep the finalizer until the tables the Deployments mount are released."""
        try:
            released = release(reconciler.kube, namespace, name, uid)
        except Exception as exc:
            raise kopf.TemporaryError(
                f"could not release the tables the Deployments mount: {api_error_detail(exc)}",
                delay=10,
            ) from exc
        if released:
            log.info("released tables of %s/%s: %s", namespace, name, ", ".join(released))
