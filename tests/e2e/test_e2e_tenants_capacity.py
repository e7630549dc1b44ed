"""A tenant against the shared GPU pool (issue 33 §1), on the real bed with real RBAC.

Namespace A (the env's) borrows a replica of its full pool (e2e_pool.POOL); while it
does, a real user of namespace B (a client certificate, the built-in `edit` role in B
only) annotates a Deployment of B with A's profile UID and run, under the field manager
`sps-operator` (`kubectl annotate --field-manager=sps-operator`: the name is any client's
to pass), and creates a BorrowReplica profile there, so the operator passes over B, plus
a bare pod carrying the run label and an ownerReference of kind "Job". Before issue 33,
B's pass gave "A's" replica back and deleted A's pool Lease. Now the Lease in the
operator's namespace is the record: A's borrow goes on undisturbed, B's Deployment is
not scaled, and A gets its replica back when its run ends.

One short test on the pool (POOL_MARKS); the clock, the scale and the bounds of every
hold are unit-tested in tests/unit/test_controller_tenant_capacity.py.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import e2e_pool
import pytest
from e2e_cluster import E2eCluster
from e2e_env import GROUP, PLURAL, VERSION, Env, OperatorRelease, server_deployment, sps_profile
from e2e_pool import BORROWED, POOL, POOL_MARKS, borrow_tag, wait_serving
from e2e_tenants import Tenant
from kubernetes import client
from kubernetes.client import ApiClient

from sps_operator.api import labels as L
from waiting import wait_for

pytestmark = POOL_MARKS


@pytest.fixture
def two_tenants(
    e2e_cluster: E2eCluster,
    e2e_api: ApiClient,
    realnode_namespace: str,
    operator_namespace: str,
    tmp_path: Path,
) -> Iterator[tuple[Env, str]]:
    """A's env (the operator watching A and B, namespaces mode) and B's namespace."""
    b = e2e_cluster.create_namespace(f"team-b-{secrets.token_hex(3)}")
    operator = OperatorRelease(e2e_cluster, operator_namespace, f"{realnode_namespace},{b}",
                               tmp_path / "clock")  # fmt: skip
    env = Env(e2e_cluster, e2e_api, realnode_namespace, operator)
    try:
        yield env, b
    finally:
        print(env.diagnostics())
        operator.uninstall()
        e2e_cluster.delete_namespace(b)


def pool_leases(env: Env) -> list[dict[str, Any]]:
    api = client.CoordinationV1Api(env.api)
    leases = api.list_namespaced_lease(env.operator.namespace, label_selector=(
        f"{L.LABEL_COMPONENT}=borrow-pool")).items  # fmt: skip
    return [env.api.sanitize_for_serialization(lease) for lease in leases]


def test_e2e_a_record_forged_by_another_tenant_frees_no_pool_and_scales_nothing(
    two_tenants: tuple[Env, str], tmp_path: Path
) -> None:
    env, b = two_tenants
    e2e_pool.full_pool_deployment(env)
    profile = sps_profile(capacity={"mode": "BorrowReplica", "borrowAfterSeconds": 5})
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, profile)
    env.operator.start()  # installs the chart: its user roles aggregate into `edit`
    tenant = Tenant.enrol(env.cluster, b, tmp_path)

    def borrowed() -> dict[str, Any] | None:
        run = (env.profile().get("status") or {}).get("currentRun") or {}
        return run if run.get("borrow") and pool_leases(env) else None

    run = wait_for("A borrows a replica", borrowed, timeout=180)
    (lease,) = pool_leases(env)
    uid = env.profile()["metadata"]["uid"]
    # B: a Deployment of its own with A's record, written "as" the operator ...
    lender = server_deployment(POOL, name="lender")
    lender["spec"]["replicas"] = 0
    lender["spec"]["progressDeadlineSeconds"] = 2147483647
    tenant.create(lender)
    forged = {"profile_uid": uid, "profile": "sps", "run": run["name"], "replicas": 3,
              "product": POOL, "at": "2026-01-01T00:00:00Z"}  # fmt: skip
    tenant.kubectl("annotate", "deployment", "lender", f"{BORROWED}={json.dumps(forged)}",
                   "--field-manager=sps-operator", "-n", tenant.namespace)  # fmt: skip
    # ... a bare pod with the run label and an ownerReference of kind "Job" ...
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "bare", "labels": {L.LABEL_RUN: run["name"], L.LABEL_COMPONENT: L.COMPONENT_POD},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": run["job"],
                             "uid": secrets.token_hex(8)}]},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                 "nodeSelector": {"no-such-node": "x"}}}  # fmt: skip
    tenant.create(bare)
    # ... and a BorrowReplica profile, so the operator passes over B.
    mine = sps_profile(name="b", selector={"matchLabels": {"deploy": "lender"}},
                       capacity={"mode": "BorrowReplica", "borrowAfterSeconds": 0})  # fmt: skip
    tenant.create(mine)
    wait_for("B's profile passed", lambda: (tenant.get("spsprofile", "b") or {}).get("status"),
             timeout=60)  # fmt: skip

    # A's borrow goes on with its own Lease, until its run ends and gives the replica back.
    # The give-back deletes the Lease, then the same pass writes status: for that moment
    # status still says "borrowing"; a state that lasts is the failure.
    gone_while_borrowing: list[float] = []

    def a_done() -> bool:
        leases = pool_leases(env)
        status = env.profile().get("status") or {}
        if leases:
            (now,) = leases
            assert now["metadata"]["uid"] == lease["metadata"]["uid"], "A's Lease was replaced"
        elif (status.get("currentRun") or {}).get("borrow"):
            gone_while_borrowing.append(time.monotonic())
            assert gone_while_borrowing[-1] - gone_while_borrowing[0] < 10, (
                "A's pool Lease is gone while A still borrows"
            )  # fmt: skip
        return bool(status.get("tables")) and not leases

    wait_for("A's run over and its replica back", a_done, timeout=420, interval=1)
    wait_serving(env, 2, "A's pool whole again")
    theirs = tenant.get("deployment", "lender") or {}
    assert theirs["spec"]["replicas"] == 0, "the operator scaled B's Deployment"
    assert borrow_tag(theirs) == forged  # left as B wrote it: a copy is no borrow
