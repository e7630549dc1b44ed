"""kopf wiring (thin): caches, wake-ups, one daemon per SpsProfile, the deletion handler.

* Indexes (async, so they never wait for a pass) keep what a pass reads: Deployments,
  the operator's own Jobs and ConfigMaps (by owner), SpsProfiles, pods, node labels,
  Services' selectors and PersistentVolumeClaims' access modes.
* Event handlers wake the profiles an event concerns (`kicks.py`); a ConfigMap that a
  server reads env from is kept current in `envsources.EnvSources`.
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
from sps_operator.api.labels import KUEUE_GROUP
from sps_operator.constants import API_GROUP, API_VERSION, PLURAL
from sps_operator.controller import indexes as ix
from sps_operator.controller.finalizer import nothing_to_release, release
from sps_operator.controller.kicks import (
    Kicks,
    profile_neighbours,
    profiles_for_config_map,
    profiles_for_pdb,
    profiles_for_pod,
    profiles_in,
    profiles_selecting,
    profiles_waiting_for_a_local_queue,
)
from sps_operator.controller.kube.client import api_error_detail
from sps_operator.controller.kube.envsources import EnvSources
from sps_operator.controller.policies.ownership import stable_config_map
from sps_operator.controller.policies.workloads import (
    DEPLOYMENT,
    LEADER_WORKER_SET,
    LWS_GROUP,
    STATEFUL_SET,
)
from sps_operator.controller.reconcile.reconciler import Reconciler

log = logging.getLogger("sps_operator.handlers")
OURS = {L.LABEL_MANAGED_BY: L.MANAGED_BY}
MIN_SLEEP = 0.2  # a pass asking to be woken "now" still yields to the others
DEPLOYMENTS = ("apps", "v1", "deployments")
STATEFUL_SETS = ("apps", "v1", "statefulsets")
# Served only where the LeaderWorkerSet CRD is installed: kopf warns that the resource is
# unresolved, keeps the index empty and starts watching when the CRD appears.
LEADER_WORKER_SETS = (LWS_GROUP, "v1", "leaderworkersets")


@dataclass(frozen=True)
class Runtime:
    """How passes are scheduled."""

    resync_seconds: float = 300.0  # the safety net; events do the real work
    workers: int = 8  # passes running at once (threads: the API client is synchronous)
    jitter: float = 0.2  # ± this fraction of resync_seconds, so profiles do not pulse


def register(registry: kopf.OperatorRegistry, reconciler: Reconciler, runtime: Runtime) -> None:
    kicks = Kicks()
    env_sources = EnvSources()
    pool = ThreadPoolExecutor(max_workers=runtime.workers, thread_name_prefix="sps-pass")
    _register_caches(registry)
    _register_profiling_wakeups(registry, reconciler, kicks)
    _register_wakeups(registry, kicks, env_sources)
    _register_passes(registry, reconciler, runtime, kicks, env_sources, pool)


def _register_caches(registry: kopf.OperatorRegistry) -> None:
    """The indexes a pass reads instead of the API (ix.world_for)."""

    @kopf.index("", "v1", "nodes", id="sps_node_labels", registry=registry)
    async def sps_node_labels(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.node_entries(body)

    @kopf.index("", "v1", "pods", id="sps_pods", registry=registry)
    async def sps_pods(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.pod_entries(body)

    @kopf.index(*DEPLOYMENTS, id="sps_deployments", registry=registry)
    async def sps_deployments(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.deployment_entries(body, DEPLOYMENT)

    @kopf.index(*STATEFUL_SETS, id="sps_stateful_sets", registry=registry)
    async def sps_stateful_sets(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.deployment_entries(body, STATEFUL_SET)

    @kopf.index(*LEADER_WORKER_SETS, id="sps_leader_worker_sets", registry=registry)
    async def sps_leader_worker_sets(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.deployment_entries(body, LEADER_WORKER_SET)

    # Deployments lending a replica, by namespace (a pass reads its own namespace's). (A
    # filter, not a None result: an object that stops matching leaves the index.)
    @kopf.index(
        *DEPLOYMENTS,
        annotations={L.ANNOTATION_BORROWED: kopf.PRESENT},
        id="sps_borrowed",
        registry=registry,
    )
    async def sps_borrowed(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.borrowed_entries(body)

    @kopf.index("policy", "v1", "poddisruptionbudgets", id="sps_pdbs", registry=registry)
    async def sps_pdbs(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.pdb_entries(body)

    @kopf.index("autoscaling", "v2", "horizontalpodautoscalers", id="sps_hpas", registry=registry)
    async def sps_hpas(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.hpa_entries(body)

    # Services' selectors: a profiling pod must never be one a Service sends traffic to.
    @kopf.index("", "v1", "services", id="sps_services", registry=registry)
    async def sps_services(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.service_entries(body)

    # Claims' access modes: a clone of a server with a ReadWriteOnce claim runs on its node.
    @kopf.index("", "v1", "persistentvolumeclaims", id="sps_claims", registry=registry)
    async def sps_claims(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.claim_entries(body)

    @kopf.index("batch", "v1", "jobs", labels=OURS, id="sps_jobs", registry=registry)
    async def sps_jobs(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.job_entries(body)

    @kopf.index("", "v1", "configmaps", labels=OURS, id="sps_config_maps", registry=registry)
    async def sps_config_maps(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.config_map_entries(body)

    @kopf.index(API_GROUP, API_VERSION, PLURAL, id="sps_profiles", registry=registry)
    async def sps_profiles(body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return ix.profile_entries(body)


def _register_profiling_wakeups(
    registry: kopf.OperatorRegistry, reconciler: Reconciler, kicks: Kicks
) -> None:
    """Events only the profiling reconciler acts on (a run's Job, what its wait for GPUs
    depends on). They wake the one daemon of the profiles they concern, like any other."""

    @kopf.on.event("batch", "v1", "jobs", labels=OURS, id="sps_wake_job", registry=registry)  # type: ignore[arg-type]
    async def wake_job(namespace: str, body: kopf.Body, **_: Any) -> None:
        kicks.kick(namespace, [ix.controller_profile(body)])

    @kopf.on.event("policy", "v1", "poddisruptionbudgets", id="sps_wake_pdb", registry=registry)  # type: ignore[arg-type]
    async def wake_pdb(
        namespace: str,
        body: kopf.Body,
        sps_deployments: Any,
        sps_stateful_sets: Any,
        sps_leader_worker_sets: Any,
        sps_profiles: Any,
        **_: Any,
    ) -> None:
        kicks.kick(
            namespace,
            profiles_for_pdb(
                body,
                namespace,
                ix.Chained(sps_deployments, sps_stateful_sets, sps_leader_worker_sets),
                sps_profiles,
            ),
        )

    # A LocalQueue created in a namespace wakes the runs there waiting for one at once,
    # not at their next recheck. Only creations count (a LocalQueue's status changes with
    # every admission); a namespace without such runs costs one index lookup. Kueue not
    # installed: kopf serves this once the CRD appears (it watches CRDs).
    @kopf.on.event(KUEUE_GROUP, "localqueues", id="sps_wake_local_queue", registry=registry)  # type: ignore[arg-type]
    async def wake_local_queue(
        namespace: str, name: str, type: str | None, sps_profiles: Any, **_: Any
    ) -> None:
        if type != "ADDED":
            return
        uids = profiles_waiting_for_a_local_queue(namespace, sps_profiles)
        if uids:
            reconciler.capacity.queue_created(namespace, name)
            kicks.kick(namespace, uids)


def _register_wakeups(
    registry: kopf.OperatorRegistry, kicks: Kicks, env_sources: EnvSources
) -> None:
    """Events that change what a pass observes of its targets, its tables or its profile:
    both reconcilers read those (a run is decided on the targets, a rollout onto them)."""

    @kopf.on.event(*DEPLOYMENTS, id="sps_wake_deployment", registry=registry)
    @kopf.on.event(*STATEFUL_SETS, id="sps_wake_stateful_set", registry=registry)
    @kopf.on.event(*LEADER_WORKER_SETS, id="sps_wake_leader_worker_set", registry=registry)  # type: ignore[arg-type]
    async def wake_deployment(namespace: str, body: kopf.Body, sps_profiles: Any, **_: Any) -> None:
        kicks.kick(namespace, profiles_selecting(body, sps_profiles, namespace))

    @kopf.on.event("", "v1", "pods", id="sps_wake_pod", registry=registry)  # type: ignore[arg-type]
    async def wake_pod(
        namespace: str, labels: Mapping[str, str], sps_deployments: Any, sps_stateful_sets: Any,
        sps_leader_worker_sets: Any, sps_profiles: Any,
        **_: Any,
    ) -> None:  # fmt: skip
        kicks.kick(
            namespace,
            profiles_for_pod(
                labels,
                namespace,
                ix.Chained(sps_deployments, sps_stateful_sets, sps_leader_worker_sets),
                sps_profiles,
            ),
        )

    @kopf.on.event("", "v1", "configmaps", labels=OURS, id="sps_wake_cm", registry=registry)  # type: ignore[arg-type]
    async def wake_config_map(namespace: str, body: kopf.Body, sps_profiles: Any, **_: Any) -> None:
        kicks.kick(namespace, profiles_for_config_map(body, sps_profiles))

    # ConfigMaps a server reads env from (anyone's, so no label filter): a changed model
    # behind `$(MODEL)` changes the server's fingerprint.
    @kopf.on.event("", "v1", "configmaps", id="sps_wake_env_cm", registry=registry)  # type: ignore[arg-type]
    async def wake_env_config_map(
        namespace: str, name: str, type: str | None, labels: Mapping[str, str],
        body: kopf.Body, sps_deployments: Any, sps_stateful_sets: Any,
        sps_leader_worker_sets: Any, sps_profiles: Any, **_: Any,
    ) -> None:  # fmt: skip
        if labels.get(L.LABEL_MANAGED_BY) == L.MANAGED_BY:
            return  # the operator's own: tables, results (sps_wake_cm)
        readers = ix.values(
            ix.Chained(sps_deployments, sps_stateful_sets, sps_leader_worker_sets),
            (ix.ENV, namespace, name),
        )
        gone = type == "DELETED"
        if env_sources.observe(namespace, name, None if gone else body, bool(readers)):
            uids = [u for d in readers for u in profiles_selecting(d, sps_profiles, namespace)]
            kicks.kick(namespace, uids)

    @kopf.on.event("", "v1", "nodes", id="sps_wake_node", registry=registry)  # type: ignore[arg-type]
    async def wake_node(
        name: str, type: str | None, labels: Mapping[str, str], sps_pods: Any, sps_profiles: Any,
        **_: Any,
    ) -> None:  # fmt: skip
        gone = type == "DELETED"
        if not kicks.node_labels_changed(name, None if gone else labels):
            return
        namespaces = set(ix.values(sps_pods, (ix.NODE, name)))
        for namespace, uids in profiles_in(namespaces, sps_profiles).items():
            kicks.kick(namespace, uids)

    @kopf.on.event(API_GROUP, API_VERSION, PLURAL, id="sps_wake_profile", registry=registry)  # type: ignore[arg-type]
    async def wake_profiles(
        namespace: str, uid: str, type: str | None, body: kopf.Body, sps_deployments: Any,
        sps_stateful_sets: Any, sps_leader_worker_sets: Any, sps_profiles: Any, **_: Any,
    ) -> None:  # fmt: skip
        before = kicks.seen(uid)
        own, shared = kicks.profile_changed(body)
        if shared or type == "DELETED":
            # Who owns a Deployment or writes a stable ConfigMap may have changed: the
            # neighbours look too.
            neighbours = profile_neighbours(
                body,
                before,
                namespace,
                ix.Chained(sps_deployments, sps_stateful_sets, sps_leader_worker_sets),
                sps_profiles,
            )
            kicks.kick(namespace, [uid, *neighbours])
        elif own:
            kicks.kick(namespace, [uid])


def _register_passes(
    registry: kopf.OperatorRegistry,
    reconciler: Reconciler,
    runtime: Runtime,
    kicks: Kicks,
    env_sources: EnvSources,
    pool: ThreadPoolExecutor,
) -> None:
    """One daemon per profile runs its passes; deletion releases what it holds."""

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
        sps_stateful_sets: Any,
        sps_leader_worker_sets: Any,
        sps_jobs: Any,
        sps_config_maps: Any,
        sps_profiles: Any,
        sps_pods: Any,
        sps_node_labels: Any,
        sps_pdbs: Any,
        sps_hpas: Any,
        sps_borrowed: Any,
        sps_services: Any,
        sps_claims: Any,
        **_: Any,
    ) -> None:
        loop = asyncio.get_running_loop()
        woken = kicks.event(uid, namespace)
        try:
            while not stopped:
                woken.clear()
                world = ix.world_for(
                    body,
                    ix.Indexes(
                        deployments=ix.Chained(
                            sps_deployments, sps_stateful_sets, sps_leader_worker_sets
                        ),
                        jobs=sps_jobs,
                        config_maps=sps_config_maps,
                        profiles=sps_profiles,
                        pods=sps_pods,
                        node_labels=sps_node_labels,
                        pdbs=sps_pdbs,
                        hpas=sps_hpas,
                        borrowed=sps_borrowed,
                        services=sps_services,
                        claims=sps_claims,
                    ),
                    job_labels=reconciler.settings.job_defaults.labels,
                    env_sources=env_sources,
                )
                current = dict(body)  # kopf keeps `body` current; a pass works on a copy
                wake = await loop.run_in_executor(pool, reconciler.reconcile, current, world)
                await _sleep(woken, stopped, runtime, wake)
        finally:
            kicks.forget(uid)

    @kopf.on.delete(API_GROUP, API_VERSION, PLURAL, id="sps_release", registry=registry)  # type: ignore[arg-type]
    def sps_release(
        namespace: str, name: str, uid: str, spec: Mapping[str, Any], status: Mapping[str, Any],
        sps_deployments: Any, sps_stateful_sets: Any, sps_leader_worker_sets: Any,
        sps_config_maps: Any, sps_borrowed: Any, **_: Any,
    ) -> None:  # fmt: skip
        stable = stable_config_map(spec)
        targets = ix.Chained(sps_deployments, sps_stateful_sets, sps_leader_worker_sets)
        deployments = (
            ix.values(targets, (ix.RECORDED, namespace, name))
            + ix.values(sps_borrowed, (ix.NAMESPACE, namespace))
            + ix.values(targets, (ix.LENDING, namespace))
        )
        owned = ix.values(sps_config_maps, (ix.OWNER, namespace, uid))
        idle = nothing_to_release(name, uid, status, deployments, owned, stable)
        release_or_retry(reconciler, namespace, name, uid, stable, lists_needed=not idle)

    @kopf.on.cleanup(registry=registry)
    async def stop_passes(**_: Any) -> None:
        pool.shutdown(wait=False, cancel_futures=True)


def release_or_retry(
    reconciler: Reconciler,
    namespace: str,
    name: str,
    uid: str,
    stable: str | None = None,
    *,
    lists_needed: bool = True,
) -> None:
    """Release what the Deployments mount, then forget the profile; on any failure the
    finalizer stays (kopf retries) and garbage collection cannot take a mounted table.
    Without `lists_needed` (nothing_to_release said so) no API call is made."""
    try:
        pools = reconciler.settings.pool_namespace
        released = (
            release(reconciler.kube, namespace, name, uid, stable, pool_namespace=pools)
            if lists_needed
            else []
        )
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
