"""Profiling where GPUs are scarce (issue 12), end to end on the local control plane.

The pool: the two nodes of e2e_pool.POOL, every GPU of them used by the target Deployment (two
replicas, each requesting all the GPUs of one node). A Clone Job asks for as many GPUs as
one replica, so it can only run if a replica makes room:
- `Wait`: the profile says WaitingForGPUs with the scheduler's words, and `kubectl sps get`
  / `explain` show it;
- `BorrowReplica`: one replica is lent to the run, the table is profiled, published and
  rolled, and the Deployment ends with both replicas ready on the new table;
- a PodDisruptionBudget that allows no disruption blocks the borrow (BorrowBlocked), and
  the borrow goes ahead once the PDB is gone;
- an operator killed mid-borrow gives the replica back after its restart;
- a profile deleted mid-borrow gives it back before it goes;
- with Kubernetes' default rolling update (a surge pod, none taken down first), the new
  table goes live on the full pool: the lent replica's slot is the surge slot, and the
  profile never says Ready/TableLive before every ready pod runs the table (its pod
  annotation and the server's own /server_info agree).

Tests of this file run one after the other on the same pool: each first waits until no
other test's pods hold its GPUs. The pool is a product no other test asks for, so they
share the bed with the other `bed_shared` tests, in one xdist group with the crash points
(e2e_pool.POOL_GROUP: one worker, one after the other).
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from typing import Any

import e2e_pool
import httpx
from e2e_env import (
    GROUP,
    PLURAL,
    SIM_TIME_SCALE,
    VERSION,
    Env,
    kubectl_sps,
    ready_true,
    sps_profile,
    wait_ready,
)
from e2e_pool import GPU, POOL, POOL_MARKS, borrow_tag, one_event, wait_serving
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from waiting import wait_for

pytestmark = POOL_MARKS

# The simulator's time scale (e2e default 40x faster than a GPU). Set it to 1 to measure how
# long a borrow lasts at the simulated GPU's own speed (docs/capacity.md).
TIME_SCALE = os.environ.get("SPS_E2E_CAPACITY_TIME_SCALE")


# ----------------------------------------------------------------------------- helpers


def full_pool_deployment(env: Env, default_strategy: bool = False) -> dict[str, Any]:
    """The pool's full Deployment; `default_strategy`: Kubernetes' own RollingUpdate
    (maxSurge 25 %, maxUnavailable 25 %: for two replicas one surge pod and none down), not
    the suite's maxUnavailable 1."""

    def use_default_strategy(dep: dict[str, Any]) -> None:
        del dep["spec"]["strategy"]

    change = use_default_strategy if default_strategy else None
    return e2e_pool.full_pool_deployment(env, time_scale=TIME_SCALE, change=change)


def wait_borrowed(env: Env, timeout: float = 120) -> dict[str, Any]:
    """The borrow in effect: recorded on the Deployment, scaled to one, and in status."""

    def borrowed() -> dict[str, Any] | None:
        dep = env.deployment()
        tag = borrow_tag(dep)
        run = (env.profile().get("status") or {}).get("currentRun") or {}
        if tag and dep["spec"]["replicas"] == 1 and run.get("borrow"):
            return {"tag": tag, "run": run}
        return None

    try:
        result: dict[str, Any] = wait_for("a replica borrowed", borrowed, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.diagnostics()}") from None
    return result


def profiling(env: Env, reason: str, timeout: float = 120) -> dict[str, Any]:
    """Wait for Profiling=False with `reason` (the run waits)."""

    def seen() -> dict[str, Any] | None:
        c = env.condition("Profiling")
        return c if c.get("status") == "False" and c.get("reason") == reason else None

    try:
        result: dict[str, Any] = wait_for(f"Profiling=False {reason}", seen, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.diagnostics()}") from None
    return result


def create_profile(env: Env, capacity: dict[str, Any]) -> None:
    profile = sps_profile(capacity=capacity)
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, profile)


def stamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def given_back(env: Env, replicas: int = 2) -> dict[str, Any]:
    """Both replicas back and serving, the borrow record gone."""
    dep = wait_serving(env, replicas, f"{replicas} replicas ready again", timeout=240)
    assert borrow_tag(dep) is None, dep["metadata"].get("annotations")
    return dep


# ----------------------------------------------------------------------------- tests


def test_e2e_wait_says_waiting_for_gpus_with_the_schedulers_words(env: Env) -> None:
    full_pool_deployment(env)
    create_profile(env, {"mode": "Wait", "waitTimeoutSeconds": 600})
    env.operator.start()
    cond = profiling(env, "WaitingForGPUs")
    assert f"Insufficient {GPU}" in cond["message"], cond
    status = env.profile()["status"]
    run = status["currentRun"]
    assert run["waiting"]["reason"] == "WaitingForGPUs"
    assert f"Insufficient {GPU}" in run["waiting"]["message"]
    assert run["waiting"]["since"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "WaitingForGPUs")
    # Wait borrows nothing.
    dep = env.deployment()
    assert dep["spec"]["replicas"] == 2 and borrow_tag(dep) is None
    assert "borrow" not in run

    # What a user sees.
    (row,) = json.loads(kubectl_sps(env, "get", "-o", "json"))
    assert row["state"] == "WaitingForGPUs"
    assert row["progress"].startswith("waiting ")
    assert row["waitingSince"] == run["waiting"]["since"]
    assert f"Insufficient {GPU}" in row["waitingMessage"]
    _header, line = kubectl_sps(env, "get").splitlines()
    assert line.split()[4:6] == ["WaitingForGPUs", "waiting"], line
    explained = kubectl_sps(env, "explain", "sps")
    assert f"The profiling Job is waiting for GPUs of {POOL} for " in explained, explained
    assert f"Insufficient {GPU}" in explained
    assert "capacity.mode: BorrowReplica" in explained
    assert f"Run {run['name']} (Diagonal): WaitingForGPUs for " in explained


def test_e2e_borrow_replica_profiles_rolls_and_gives_the_replica_back(env: Env) -> None:
    full_pool_deployment(env)
    create_profile(env, {"mode": "BorrowReplica", "borrowAfterSeconds": 5})
    env.operator.start()
    # Serving capacity, sampled while the run goes: when fewer than 2 replicas are ready.
    below: list[float] = []
    started = time.monotonic()

    def ready_with_samples() -> dict[str, Any] | None:
        dep = env.deployment()
        if (dep.get("status") or {}).get("readyReplicas", 0) < 2:
            below.append(time.monotonic())
        c = env.condition("Ready")
        return c if c.get("status") == "True" else None

    borrowed = wait_borrowed(env)
    assert borrowed["tag"]["replicas"] == 2 and borrowed["tag"]["product"] == POOL
    assert borrowed["run"]["borrow"]["deployment"] == "server"
    wait_for("Ready=True", ready_with_samples, timeout=420, interval=0.5)
    wait_ready(env, timeout=10)  # and the operator is still running

    status = env.profile()["status"]
    (table,) = status["tables"]
    assert table["gpuProduct"] == POOL and table["run"] == borrowed["run"]["name"]
    assert status.get("currentRun") is None
    # Both replicas back, serving the new table, the record gone.
    dep = given_back(env)
    assert dep["spec"]["template"]["metadata"]["annotations"]["sps.dev/table-hash"] == table["hash"]
    pods = ready_server_pods(env)
    assert len(pods) == 2
    assert {p["metadata"]["annotations"]["sps.dev/table-hash"] for p in pods} == {table["hash"]}
    # The Job ran in the pool, on the GPUs the borrowed replica freed.
    (job,) = env.jobs()
    assert job["status"].get("succeeded") == 1
    (job_pod,) = env.pods(f"job-name={job['metadata']['name']}")
    assert job_pod["spec"]["nodeName"] in env.cluster.nodes_with_product(POOL)

    # The events say when the replica was lent and given back.
    lent = one_event(env, "ReplicaBorrowed")
    back = one_event(env, "ReplicaReturned")
    assert "borrowed one of 2 replicas of server" in lent.message
    assert "gave the borrowed replica back to server" in back.message
    lent_at, back_at = lent.first_timestamp, back.first_timestamp
    borrow_seconds = (back_at - lent_at).total_seconds()
    assert borrow_seconds >= 0
    # The wait is a metric.
    text = env.operator.metrics()
    waits = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "sps_gpu_wait_seconds_count" and s.labels.get("namespace") == env.namespace
    ]
    assert waits == [1.0]
    below_seconds = (below[-1] - below[0]) if below else 0.0
    print(
        f"borrow (simulator time scale {TIME_SCALE or SIM_TIME_SCALE}): "
        f"lent {lent_at:%H:%M:%S}, given back {back_at:%H:%M:%S} = {borrow_seconds:.0f} s "
        f"with one replica (events); fewer than 2 ready replicas for ~{below_seconds:.0f} s of "
        f"{time.monotonic() - started:.0f} s (borrow + rolling update)"
    )


def test_e2e_a_pdb_that_allows_no_disruption_blocks_the_borrow(env: Env) -> None:
    full_pool_deployment(env)
    policy = client.PolicyV1Api(env.api)
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "server-pdb"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"deploy": "server"}}},
    }
    policy.create_namespaced_pod_disruption_budget(env.namespace, pdb)

    def no_disruption() -> bool:
        st = policy.read_namespaced_pod_disruption_budget("server-pdb", env.namespace).status
        return st is not None and st.expected_pods == 2 and st.disruptions_allowed == 0

    wait_for("the PDB computed (0 disruptions allowed)", no_disruption, timeout=60)
    create_profile(env, {"mode": "BorrowReplica", "borrowAfterSeconds": 0})
    env.operator.start()
    cond = profiling(env, "BorrowBlocked")
    assert "PodDisruptionBudget server-pdb allows no disruption of server" in cond["message"]
    assert f"Insufficient {GPU}" in cond["message"]  # and why it wanted to borrow
    ready = env.condition("Ready")
    assert (ready["status"], ready["reason"]) == ("False", "BorrowBlocked")
    dep = env.deployment()
    assert dep["spec"]["replicas"] == 2 and borrow_tag(dep) is None
    explained = kubectl_sps(env, "explain", "sps")
    assert "borrowing a replica is refused" in explained, explained
    assert "PodDisruptionBudget server-pdb" in explained

    # Without the PDB, the borrow goes ahead.
    policy.delete_namespaced_pod_disruption_budget("server-pdb", env.namespace)
    borrowed = wait_borrowed(env)
    assert borrowed["tag"]["replicas"] == 2


def test_e2e_an_operator_killed_mid_borrow_gives_the_replica_back_after_restart(
    env: Env,
) -> None:
    full_pool_deployment(env)
    create_profile(env, {"mode": "BorrowReplica", "borrowAfterSeconds": 0})
    env.operator.start()
    borrowed = wait_borrowed(env)
    env.operator.kill()
    # The run finishes while nobody watches: its Job completes, the replica stays lent.
    job_name = borrowed["run"]["job"]

    def job_done() -> bool:
        job = env.batch.read_namespaced_job(job_name, env.namespace)
        return bool(job.status.succeeded or job.status.failed)

    wait_for("the Job finished with the operator down", job_done, timeout=300, interval=1)
    dep = env.deployment()
    assert dep["spec"]["replicas"] == 1 and borrow_tag(dep) is not None

    env.operator.start()
    wait_ready(env, timeout=300)
    given_back(env)
    back = one_event(env, "ReplicaReturned")
    assert "gave the borrowed replica back to server" in back.message


def test_e2e_a_profile_deleted_mid_borrow_gives_the_replica_back(env: Env) -> None:
    full_pool_deployment(env)
    create_profile(env, {"mode": "BorrowReplica", "borrowAfterSeconds": 0})
    env.operator.start()
    wait_borrowed(env)
    env.delete_profile()
    given_back(env)


def ready_server_pods(env: Env) -> list[dict[str, Any]]:
    return [
        p
        for p in env.pods("deploy=server")
        if not p["metadata"].get("deletionTimestamp") and ready_true(p)
    ]


def test_e2e_a_full_pool_with_the_default_rolling_update_gets_the_new_table_live(
    env: Env,
) -> None:
    """Issue 21 §0: with the default strategy the rollout needs a surge pod, which a full
    pool cannot schedule; the profile once waited forever, then turned Ready=True
    TableLive at the progress deadline with the table on no running pod."""
    full_pool_deployment(env, default_strategy=True)
    create_profile(env, {"mode": "BorrowReplica", "borrowAfterSeconds": 5})
    env.operator.start()
    early: list[str] = []
    held: list[dict[str, Any]] = []

    def live() -> dict[str, Any] | None:
        status = env.profile().get("status") or {}
        if status.get("rolloutBorrow"):
            held.append(status["rolloutBorrow"])
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        if ready.get("status") != "True":
            return None
        hashes = {t.get("hash") for t in status.get("targets") or []}
        for pod in ready_server_pods(env):
            served = (pod["metadata"].get("annotations") or {}).get("sps.dev/table-hash")
            if served not in hashes:
                early.append(f"{ready['reason']} while {pod['metadata']['name']} runs {served}")
        return status

    borrowed = wait_borrowed(env)
    assert borrowed["tag"]["replicas"] == 2
    try:
        status = wait_for("Ready=True on the full pool", live, timeout=600, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{env.diagnostics()}") from None
    assert not early, early
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "TableLive"
    (table,) = status["tables"]
    # The replica stayed lent for the rollout (its slot the surge slot), then came back.
    assert held and held[0]["table"] == table["hash"] and held[0]["replicas"] == 2
    kept = one_event(env, "ReplicaHeldForRollout")
    assert "maxUnavailable 0" in kept.message
    back = one_event(env, "ReplicaReturned")
    assert "(the new table runs on every ready pod)" in back.message
    dep = given_back(env)
    assert dep["spec"]["template"]["metadata"]["annotations"]["sps.dev/table-hash"] == table["hash"]
    # Every ready pod runs the table: its annotation, and the server's own report.
    pods = ready_server_pods(env)
    assert len(pods) == 2
    for pod in pods:
        assert pod["metadata"]["annotations"]["sps.dev/table-hash"] == table["hash"]
        info = httpx.get(f"http://{pod['status']['podIP']}:30000/server_info", timeout=10).json()
        assert info["sps_table"]["loaded"] is True, info["sps_table"]
        assert info["sps_table"]["sha256"] == table["hash"], info["sps_table"]
    # The GPU pool is free for the next borrow.
    leases = client.CoordinationV1Api(env.api).list_namespaced_lease(
        env.operator.namespace, label_selector="sps.dev/component=borrow-pool"
    )
    assert not leases.items
