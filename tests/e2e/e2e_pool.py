"""The pool where GPUs are scarce (BorrowReplica): a Deployment whose replicas take every
GPU of the pool's nodes, and what a borrow leaves on it.

The pool is a product of its own in the tests' bed (sps_testbed.TEST_NODES: two RTX PRO
6000 nodes beside the H100 and H200 ones), so the tests that fill it (capacity, crash
points) run beside the other shared tests, one after another in one xdist group
(POOL_GROUP): no other test asks for its GPUs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from e2e_env import Env, server_deployment

from sps_sim.costmodel import GPU_RTX_PRO_6000
from waiting import wait_for

POOL = GPU_RTX_PRO_6000
# The xdist group of the tests that fill the pool: `make test` runs them one after another
# on one worker (`--dist loadgroup`) while the other shared tests run on the others.
POOL_GROUP = "gpu-pool"
# The marks of a module of such tests (`pytestmark = POOL_MARKS`).
POOL_MARKS = [
    pytest.mark.k8s,
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.bed_shared,
    pytest.mark.xdist_group(POOL_GROUP),
]
BORROWED = "sps.dev/borrowed"
GPU = "nvidia.com/gpu"


def pool_gpus(env: Env) -> tuple[list[str], int]:
    """The pool's nodes and the GPUs of each (the test bed gives them all the same)."""
    nodes = env.cluster.nodes_with_product(POOL)
    assert len(nodes) == 2, (
        f"the bed has {len(nodes)} nodes of {POOL}, these tests want two: start it with "
        f"the tests' nodes (sps_testbed.TEST_NODES; `sps-testbed run`, the pytest plugin)"
    )
    counts = {int(env.core.read_node(n).status.allocatable[GPU]) for n in nodes}
    assert len(counts) == 1, (nodes, counts)
    return nodes, counts.pop()


def gpus_held(env: Env, nodes: list[str]) -> dict[str, int]:
    """GPUs requested by pods bound to `nodes` that still hold them (any namespace)."""
    held: dict[str, int] = {}
    for node in nodes:
        pods = env.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        for pod in pods:
            if pod.status.phase in ("Succeeded", "Failed"):
                continue
            for c in [*(pod.spec.containers or []), *(pod.spec.init_containers or [])]:
                limits = (c.resources.limits if c.resources else None) or {}
                if GPU in limits:
                    key = f"{pod.metadata.namespace}/{pod.metadata.name}"
                    held[key] = held.get(key, 0) + int(limits[GPU])
    return held


def create_full_pool_deployment(
    env: Env,
    name: str = "server",
    time_scale: str | None = None,
    change: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Once the pool is free, a Deployment `name` of one replica per pool node, each taking
    every GPU of its node (`change` edits it first); returns the replicas."""
    nodes, per_node = pool_gpus(env)
    wait_for(
        f"the {POOL} pool free of other tests' pods",
        lambda: not gpus_held(env, nodes),
        timeout=180,
        interval=1,
    )
    dep = server_deployment(
        POOL, name=name, env={"SPS_SIM_TIME_SCALE": time_scale} if time_scale else None
    )
    dep["spec"]["replicas"] = len(nodes)
    dep["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {GPU: str(per_node)}}
    if change is not None:
        change(dep)
    env.apps.create_namespaced_deployment(env.namespace, dep)
    return len(nodes)


def full_pool_deployment(
    env: Env,
    name: str = "server",
    time_scale: str | None = None,
    change: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """`create_full_pool_deployment`; returns the Deployment when every replica serves."""
    replicas = create_full_pool_deployment(env, name, time_scale, change)
    return wait_serving(env, replicas, "both replicas serving (the pool full)", name=name)


def wait_serving(
    env: Env, replicas: int, what: str, timeout: float = 180, name: str = "server"
) -> dict[str, Any]:
    def serving() -> dict[str, Any] | None:
        dep = env.deployment(name)
        st = dep.get("status") or {}
        ok = (
            dep["spec"]["replicas"] == replicas
            and st.get("observedGeneration", 0) >= dep["metadata"]["generation"]
            and st.get("readyReplicas", 0) == replicas
            and st.get("updatedReplicas", 0) == replicas
            and st.get("replicas", 0) == replicas
        )
        return dep if ok else None

    result: dict[str, Any] = wait_for(what, serving, timeout=timeout)
    return result


def borrow_tag(dep: dict[str, Any]) -> dict[str, Any] | None:
    text = ((dep.get("metadata") or {}).get("annotations") or {}).get(BORROWED)
    return json.loads(text) if text else None


def one_event(env: Env, reason: str, timeout: float = 60) -> Any:
    """The one event of `reason` on the profile, waited for: the operator posts an event in
    the background after the write it tells of, so a test that has seen the write can read
    before the event lands (ci3, 2026-12-07: ReplicaReturned read at Ready, before it came)."""

    def found() -> list[Any] | None:
        selector = f"involvedObject.kind=SpsProfile,reason={reason}"
        return list(env.core.list_namespaced_event(env.namespace, field_selector=selector).items)

    items: list[Any] = wait_for(f"the {reason} event", lambda: found() or None, timeout, 0.5)
    assert len(items) == 1, [e.message for e in items]
    return items[0]
