"""kopf wiring (thin): caches, wake-ups, one daemon per SpsProfile, the deletion handler.

* Indexes (async, so they never wait for a pass) keep what a pass reads: Deployments,
  the operator's own Jobs and ConfigMaps (by label), SpsProfiles, pods and node labels.
* Event handlers wake the profiles an event concerns (`kicks.py`).
* A daemon per SpsProfile runs one pass at a time for it, in a thread pool shared by all
  profiles (no global lock), when woken or after a jittered resync as a safety net.
* Deletion releases the tables the Deployments mount, then forgets the profile.

Nothing here writes to Deployments, Pods or Nodes: no kopf annotations on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import kopf

from sps_operator.api import labels as L
from sps_operator.constants import API_GROUP, API_VERSION, PLURAL
from sps_operator.controller.kicks import (
    Kicks,
    profile_neighbours,
    profiles_for_pdb,
    profiles_for_pod,
    profiles_selecting,
)
from sps_operator.controller.kube import api_error_detail
from sps_operator.controller.ownership import ProfileSummary, profile_summary
from sps_operator.controller.placement import pod_info
from sps_operator.controller.reconcile import Reconciler
from sps_operator.controller.release import nothing_to_release, release
from sps_operator.controller.state import CachedWorld

log = logging.getLogger("sps_operator.handlers")
OURS = {L.LABEL_MANAGED_BY: L.MANAGED_BY}
MIN_SLEEP = 0.2  # a pass asking to be woken "now" still yields to the others
DEPLOYMENTS = ("apps", "v1", "deployments")


@dataclass(frozen=True)
class Runtime:
    """How passes are scheduled."""

    resync_seconds: float = 300.0  # the safety net; events do the real work
    workers: int = 8  # passes running at once (threads: the API client is synchronous)
    jitter: float = 0.2  # ± this fraction of resync_seconds, so profiles do not pulse


_BORROWED_KEY = f"f:{L.ANNOTATION_BORROWED}"


def _slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """An object as a pass needs it: without managedFields (the bulk of most objects),
    except who owns spec.replicas (BorrowReplica must know who scales it) and who wrote the
    borrow record (only the operator's own is trusted)."""
    meta = dict(body.get("metadata") or {})
    kept = []
    for m in meta.get("managedFields") or []:
        fields = m.get("fieldsV1") or {}
        slim: dict[str, Any] = {}
        if "f:replicas" in (fields.get("f:spec") or {}):
            slim["f:spec"] = {"f:replicas": {}}
        if _BORROWED_KEY in ((fields.get("f:metadata") or {}).get("f:annotations") or {}):
            slim["f:metadata"] = {"f:annotations": {_BORROWED_KEY: {}}}
        if slim:
            kept.append({"manager": m.get("manager"), "operation": m.get("operation"),
                         "fieldsV1": slim})  # fmt: skip
    meta["managedFields"] = kept
    return {**dict(body), "metadata": meta}


def _values(index: Any, key: Any) -> list[Any]:
    return list(index.get(key, [])) if index is not None else []


def register(registry: kopf.OperatorRegistry, reconciler: Reconciler, runtime: Runtime) -> None:
    kicks = Kicks()
    pool = ThreadPoolExecutor(max_workers=runtime.workers, thread_name_prefix="sps-pass")

    # ------------------------------------------------------------------ caches

    @kopf.index("", "v1", "nodes", id="sps_node_labels", registry=registry)
    async def sps_node_labels(name: str, labels: Mapping[str, str], **_: Any) -> dict[str, Any]:
        return {name: dict(labels)}

    @kopf.index("", "v1", "pods", id="sps_pods", registry=registry)  # type: ignore[arg-type]
    async def sps_pods(
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        spec: Mapping[str, Any],
        status: Mapping[str, Any],
        meta: Mapping[str, Any],
        **_: Any,
    ) -> dict[str, Any]:
        return {namespace: pod_info(name, labels, spec, status, meta)}

    @kopf.index(*DEPLOYMENTS, id="sps_deployments", registry=registry)
    async def sps_deployments(namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, Any]:
        return {namespace or "": _slim(body)}

    # Deployments of every namespace lending a replica: one borrow per GPU product. (A
    # filter, not a None result: an object that stops matching leaves the index.)
    @kopf.index(
        *DEPLOYMENTS,
        annotations={L.ANNOTATION_BORROWED: kopf.PRESENT},
        id="sps_borrowed",
        registry=registry,
    )
    async def sps_borrowed(body: kopf.Body, **_: Any) -> dict[str, Any]:
        return {"all": _slim(body)}

    @kopf.index("policy", "v1", "poddisruptionbudgets", id="sps_pdbs", registry=registry)
    async def sps_pdbs(namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, Any]:
        return {namespace or "": _slim(body)}

    @kopf.index("autoscaling", "v2", "horizontalpodautoscalers", id="sps_hpas", registry=registry)
    async def sps_hpas(namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, Any]:
        return {namespace or "": _slim(body)}

    @kopf.index("batch", "v1", "jobs", labels=OURS, id="sps_jobs", registry=registry)
    async def sps_jobs(labels: Mapping[str, str], body: kopf.Body, **_: Any) -> dict[str, Any]:
        return {labels.get(L.LABEL_PROFILE_UID, ""): _slim(body)}

    @kopf.index("", "v1", "configmaps", labels=OURS, id="sps_config_maps", registry=registry)
    async def sps_config_maps(
        namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
    ) -> dict[str, Any]:
        # A profile's own by its UID; the stable ones (AnnotateOnly) by namespace.
        key = labels.get(L.LABEL_PROFILE_UID) or namespace or ""
        return {key: _slim(body)}

    @kopf.index(API_GROUP, API_VERSION, PLURAL, id="sps_profiles", registry=registry)
    async def sps_profiles(namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, Any]:
        return {namespace or "": profile_summary(body)}

    # ------------------------------------------------------------------ wake-ups

    def in_namespace(index: Any, namespace: str) -> list[ProfileSummary]:
        return list(_values(index, namespace))

    @kopf.on.event(*DEPLOYMENTS, id="sps_wake_deployment", registry=registry)  # type: ignore[arg-type]
    async def wake_deployment(namespace: str, body: kopf.Body, sps_profiles: Any, **_: Any) -> None:
        kicks.kick(profiles_selecting(body, in_namespace(sps_profiles, namespace)))

    @kopf.on.event("", "v1", "pods", id="sps_wake_pod", registry=registry)  # type: ignore[arg-type]
    async def wake_pod(
        namespace: str, labels: Mapping[str, str], sps_deployments: Any, sps_profiles: Any,
        **_: Any,
    ) -> None:  # fmt: skip
        deployments = _values(sps_deployments, namespace)
        kicks.kick(profiles_for_pod(labels, deployments, in_namespace(sps_profiles, namespace)))

    @kopf.on.event("policy", "v1", "poddisruptionbudgets", id="sps_wake_pdb", registry=registry)  # type: ignore[arg-type]
    async def wake_pdb(
        namespace: str, body: kopf.Body, sps_deployments: Any, sps_profiles: Any, **_: Any
    ) -> None:
        deployments = _values(sps_deployments, namespace)
        kicks.kick(profiles_for_pdb(body, deployments, in_namespace(sps_profiles, namespace)))

    @kopf.on.event("batch", "v1", "jobs", labels=OURS, id="sps_wake_job", registry=registry)
    async def wake_job(labels: Mapping[str, str], **_: Any) -> None:
        kicks.kick([labels.get(L.LABEL_PROFILE_UID, "")])

    @kopf.on.event("", "v1", "configmaps", labels=OURS, id="sps_wake_cm", registry=registry)
    async def wake_config_map(labels: Mapping[str, str], **_: Any) -> None:
        kicks.kick([labels.get(L.LABEL_PROFILE_UID, "")])

    @kopf.on.event("", "v1", "nodes", id="sps_wake_node", registry=registry)  # type: ignore[arg-type]
    async def wake_node(
        name: str, type: str | None, labels: Mapping[str, str], sps_pods: Any, sps_profiles: Any,
        **_: Any,
    ) -> None:  # fmt: skip
        gone = type == "DELETED"
        if not kicks.node_labels_changed(name, None if gone else labels):
            return
        namespaces = {ns for ns, store in sps_pods.items() for pod in store if pod.node == name}
        kicks.kick(p.uid for ns in namespaces for p in in_namespace(sps_profiles, ns))

    @kopf.on.event(API_GROUP, API_VERSION, PLURAL, id="sps_wake_profile", registry=registry)  # type: ignore[arg-type]
    async def wake_profiles(
        namespace: str, uid: str, type: str | None, body: kopf.Body, sps_deployments: Any,
        sps_profiles: Any, **_: Any,
    ) -> None:  # fmt: skip
        before = kicks.selector_seen(uid)
        own, shared = kicks.profile_changed(body)
        if shared or type == "DELETED":
            # Who owns a Deployment may have changed: the neighbours look too.
            deployments = _values(sps_deployments, namespace)
            neighbours = in_namespace(sps_profiles, namespace)
            kicks.kick([uid, *profile_neighbours(body, before, deployments, neighbours)])
        elif own:
            kicks.kick([uid])

    # ------------------------------------------------------------------ the passes

    @kopf.daemon(  # type: ignore[arg-type]
        API_GROUP,
        API_VERSION,
        PLURAL,
        id="sps_profile",
        cancellation_timeout=10.0,
        registry=registry,
    )
    async def sps_profile(
        body: kopf.Body,
        namespace: str,
        uid: str,
        stopped: kopf.DaemonStopped,
        sps_deployments: Any,
        sps_jobs: Any,
        sps_config_maps: Any,
        sps_profiles: Any,
        sps_pods: Any,
        sps_node_labels: Any,
        sps_pdbs: Any,
        sps_hpas: Any,
        sps_borrowed: Any,
        **_: Any,
    ) -> None:
        loop = asyncio.get_running_loop()
        woken = kicks.event(uid)
        try:
            while not stopped:
                woken.clear()
                world = CachedWorld(
                    kube=reconciler.kube,
                    deployments=_values(sps_deployments, namespace),
                    jobs=_values(sps_jobs, uid),
                    config_maps=_values(sps_config_maps, uid) + _values(sps_config_maps, namespace),
                    profiles=in_namespace(sps_profiles, namespace),
                    pods=_values(sps_pods, namespace),
                    node_labels={n: next(iter(s)) for n, s in sps_node_labels.items() if s},
                    pdbs=_values(sps_pdbs, namespace),
                    hpas=_values(sps_hpas, namespace),
                    borrowed=_values(sps_borrowed, "all"),
                )
                current = dict(body)  # kopf keeps `body` current; a pass works on a copy
                wake = await loop.run_in_executor(pool, reconciler.reconcile, current, world)
                await _sleep(woken, stopped, runtime, wake)
        finally:
            kicks.forget(uid)

    @kopf.on.delete(API_GROUP, API_VERSION, PLURAL, id="sps_release", registry=registry)  # type: ignore[arg-type]
    def sps_release(
        namespace: str, name: str, uid: str, status: Mapping[str, Any], sps_deployments: Any,
        sps_config_maps: Any, **_: Any,
    ) -> None:  # fmt: skip
        deployments = _values(sps_deployments, namespace)
        idle = nothing_to_release(name, uid, status, deployments, _values(sps_config_maps, uid))
        release_or_retry(reconciler, namespace, name, uid, lists_needed=not idle)

    @kopf.on.cleanup(registry=registry)
    async def stop_passes(**_: Any) -> None:
        pool.shutdown(wait=False, cancel_futures=True)


def release_or_retry(
    reconciler: Reconciler, namespace: str, name: str, uid: str, *, lists_needed: bool = True
) -> None:
    """Release what the Deployments mount, then forget the profile; on any failure the
    finalizer stays (kopf retries) and garbage collection cannot take a mounted table.
    Without `lists_needed` (nothing_to_release said so) no API call is made."""
    try:
        pools = reconciler.settings.pool_namespace
        released = release(reconciler.kube, namespace, name, uid, pools) if lists_needed else []
    except Exception as exc:
        raise kopf.TemporaryError(
            f"could not release the tables the Deployments mount: {api_error_detail(exc)}",
            delay=10,
        ) from exc
    reconciler.metrics.forget(namespace, name)
    reconciler.forget(uid)
    if released:
        log.info("released tables of %s/%s: %s", namespace, name, ", ".join(released))


async def _sleep(
    woken: asyncio.Event, stopped: kopf.DaemonStopped, runtime: Runtime, wake: float | None
) -> None:
    """Until woken, stopped, the time the pass asked for, or the jittered resync."""
    spread = runtime.resync_seconds * runtime.jitter
    timeout = runtime.resync_seconds + random.uniform(-spread, spread)
    if wake is not None:
        timeout = min(timeout, wake + MIN_SLEEP)
    waits = {
        asyncio.ensure_future(woken.wait()),
        asyncio.ensure_future(stopped.wait()),
    }
    try:
        await asyncio.wait(waits, timeout=max(timeout, 0.1), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
