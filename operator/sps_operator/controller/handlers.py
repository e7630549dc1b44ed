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
from sps_operator.controller import names
from sps_operator.controller.placement import PodInfo
from sps_operator.controller.reconcile import Reconciler

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
    def sps_release(body: kopf.Body, namespace: str, name: str, **_: Any) -> None:
        """Owned objects go with the SpsProfile (garbage collection), except the tables the
        Deployments still mount: those are released (ownerReference dropped) so the
        Deployments keep serving and can restart."""
        status = body.get("status") or {}
        in_use = {t.get("table") for t in status.get("targets") or [] if t.get("table")}
        for cm_name in sorted(in_use):
            patch = {
                "metadata": {
                    "ownerReferences": None,
                    "labels": {f"{names.LABEL_PREFIX_RELEASED}": "true"},
                }
            }
            try:
                reconciler.kube.patch_config_map_metadata(namespace, cm_name, patch)
            except Exception as exc:
                log.warning("could not release table %s: %s", cm_name, exc)
