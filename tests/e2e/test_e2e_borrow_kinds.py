"""BorrowReplica from a StatefulSet on the real bed (issue 34 §1): a StatefulSet of two
replicas fills the pool (each replica every GPU of one pool node); the profiling Job can
only run when one is lent. The operator scales the StatefulSet to one (its controller
removes the highest ordinal, server-1), the Job profiles on the freed GPUs, and the
replica comes back (server-1 recreated) with the record gone, both pods on the new table.

Runs in the pool's xdist group (e2e_pool.POOL_GROUP), one after the other with the other
tests that fill the pool."""

from __future__ import annotations

import json
from typing import Any

from e2e_env import GROUP, PLURAL, VERSION, Env, ready_true, server_deployment, sps_profile
from e2e_pool import GPU, POOL, POOL_MARKS, borrow_tag, gpus_held, one_event, pool_gpus
from kubernetes import client

from waiting import wait_for

pytestmark = POOL_MARKS


def full_pool_stateful_set(env: Env) -> None:
    """Once the pool is free, a StatefulSet `server` of one replica per pool node, each
    taking every GPU of its node (pods in parallel: no reason to wait for each)."""
    nodes, per_node = pool_gpus(env)
    wait_for(f"the {POOL} pool free of other tests' pods", lambda: not gpus_held(env, nodes),
             timeout=180, interval=1)  # fmt: skip
    dep = server_deployment(POOL, name="server")
    template = dep["spec"]["template"]
    template["spec"]["containers"][0]["resources"] = {"limits": {GPU: str(per_node)}}
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": dep["metadata"],
        "spec": {
            "replicas": len(nodes),
            "serviceName": "server",
            "podManagementPolicy": "Parallel",
            "selector": dep["spec"]["selector"],
            "template": template,
        },
    }
    env.apps.create_namespaced_stateful_set(env.namespace, sts)
    serving(env, len(nodes), "both replicas serving (the pool full)")


def stateful_set(env: Env) -> dict[str, Any]:
    resp = env.apps.read_namespaced_stateful_set("server", env.namespace, _preload_content=False)
    result: dict[str, Any] = json.loads(resp.data)
    return result


def serving(env: Env, replicas: int, what: str, timeout: float = 240) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        sts = stateful_set(env)
        st = sts.get("status") or {}
        ok = (
            sts["spec"]["replicas"] == replicas
            and st.get("observedGeneration", 0) >= sts["metadata"]["generation"]
            and st.get("readyReplicas", 0) == replicas
            and st.get("replicas", 0) == replicas
        )
        return sts if ok else None

    try:
        result: dict[str, Any] = wait_for(what, ready, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.diagnostics()}") from None
    return result


def test_e2e_a_stateful_set_on_a_full_pool_lends_its_highest_ordinal_and_gets_it_back(
    env: Env,
) -> None:
    full_pool_stateful_set(env)
    profile = sps_profile(capacity={"mode": "BorrowReplica", "borrowAfterSeconds": 5})
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, profile)
    env.operator.start()

    def borrowed() -> dict[str, Any] | None:
        sts, run = stateful_set(env), (env.profile().get("status") or {}).get("currentRun") or {}
        tag = borrow_tag(sts)
        return {"tag": tag, "run": run} if tag and sts["spec"]["replicas"] == 1 else None

    try:
        lent = wait_for("one replica of the StatefulSet lent", borrowed, timeout=180)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.diagnostics()}") from None
    assert lent["tag"]["replicas"] == 2 and lent["tag"]["product"] == POOL
    # The StatefulSet controller removes the highest ordinal: server-0 keeps serving.
    wait_for("server-1 gone", lambda: not env.pods("deploy=server") or all(
        p["metadata"]["name"] == "server-0" for p in env.pods("deploy=server")
        if not p["metadata"].get("deletionTimestamp")), timeout=120)  # fmt: skip

    def ready() -> dict[str, Any] | None:
        c = env.condition("Ready")
        return c if c.get("status") == "True" else None

    try:
        wait_for("Ready=True", ready, timeout=420, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.diagnostics()}") from None
    status = env.profile()["status"]
    (table,) = status["tables"]
    assert table["gpuProduct"] == POOL and table["run"] == lent["run"]["name"]
    (target,) = status["targets"]
    assert target["kind"] == "StatefulSet"
    sts = serving(env, 2, "both replicas back and ready")
    assert borrow_tag(sts) is None, sts["metadata"].get("annotations")
    (job,) = env.jobs()
    (job_pod,) = env.pods(f"job-name={job['metadata']['name']}")
    assert job_pod["spec"]["nodeName"] in env.cluster.nodes_with_product(POOL)
    pods = [p for p in env.pods("deploy=server") if ready_true(p)]
    assert sorted(p["metadata"]["name"] for p in pods) == ["server-0", "server-1"]
    back = one_event(env, "ReplicaReturned")
    assert "gave the borrowed replica back to server" in (back.message or "")
    # The GPU pool is free for the next borrow.
    leases = client.CoordinationV1Api(env.api).list_namespaced_lease(
        env.operator.namespace, label_selector="sps.dev/component=borrow-pool"
    )
    assert not leases.items
