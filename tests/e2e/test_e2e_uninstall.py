"""Nothing a user does to the operator breaks a serving SGLang pod (issue 36 §1): after
each way of taking the operator away, a server pod deleted comes back Ready with its table.

One test walks three orders on one Deployment, a fresh profile (and one profiling run)
for each:
1. the issue's reproduction: `helm uninstall`, `kubectl delete crd` (which waits on the
   profile's finalizer, no operator to run it), the finalizer removed by hand;
2. the profile deleted with the operator running (its finalizer releases the table);
3. the CRD deleted with the operator running, then `helm uninstall`: kopf stops serving
   a resource whose CRD is terminating, so the finalizer waits as in 1 and is removed by
   hand.
The CRD is deleted here: this module must not share its CRD with another (the module
fixture installs it again, and so does this test when it ends).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from e2e_env import (
    CRD,
    GROUP,
    PLURAL,
    VERSION,
    Env,
    crd_gone,
    force_crd_gone,
    install_crd,
    rolled_to,
    server_deployment,
    serving_pod_info,
    sps_profile,
    wait_ready,
)
from kubernetes.client.rest import ApiException

from sps_sim.costmodel import GPU_H100
from waiting import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.slow]


def live_table(env: Env, name: str) -> dict[str, Any]:
    """Start the operator if it is not running, wait until profile `name`'s table is live
    on the Deployment; the table's status entry."""
    env.operator.start()
    wait_ready(env)
    (table,) = env.profile(name)["status"]["tables"]
    wait_for("the table rolled out", lambda: rolled_to(env, table["hash"]), timeout=180)
    return dict(table)


def new_profile(env: Env, name: str) -> None:
    env.custom.create_namespaced_custom_object(
        GROUP, VERSION, env.namespace, PLURAL, sps_profile(name=name)
    )


def control_config_map(env: Env, name: str) -> str:
    """A ConfigMap owned by profile `name` alone, as an unmounted table is: once it is
    gone, the garbage collector has done its work on the profile's dependents."""
    profile = env.profile(name)
    cm_name = f"control-{name}"
    env.core.create_namespaced_config_map(
        env.namespace,
        {
            "metadata": {
                "name": cm_name,
                "ownerReferences": [
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "SpsProfile",
                        "name": name,
                        "uid": profile["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "data": {"x": "y"},
        },
    )
    return cm_name


def gone(read: Any) -> bool:
    try:
        read()
    except ApiException as exc:
        return exc.status == 404
    return False


def wait_collected(env: Env, cm_name: str) -> None:
    wait_for(
        f"the garbage collector deleted {cm_name}",
        lambda: gone(lambda: env.config_map(cm_name)),
        timeout=120,
    )
    # Dependents of one owner are queued together; a moment for the table's turn.
    time.sleep(5)


def server_restarts_with(env: Env, table: dict[str, Any]) -> None:
    """The table's ConfigMap is there, owned by the Deployment; a server pod deleted comes
    back Ready, serving the table."""
    cm = env.config_map(table["configMap"])
    server_uid = env.deployment()["metadata"]["uid"]
    assert server_uid in {r["uid"] for r in cm["metadata"].get("ownerReferences") or []}, cm
    old = [p["metadata"]["name"] for p in env.pods("deploy=server")]
    env.core.delete_namespaced_pod(old[0], env.namespace, grace_period_seconds=0)
    served = serving_pod_info_excluding(env, table["hash"], set(old))
    assert served["info"]["speculative_dspark_sps_table_path"], served["info"]


def serving_pod_info_excluding(env: Env, table_hash: str, old: set[str]) -> dict[str, Any]:
    def replaced() -> bool:
        names = {
            p["metadata"]["name"]
            for p in env.pods("deploy=server")
            if not p["metadata"].get("deletionTimestamp")
        }
        return bool(names) and not names & old

    wait_for("a new server pod", replaced, timeout=120)
    return serving_pod_info(env, table_hash)


def test_e2e_every_uninstall_order_leaves_servers_able_to_restart(env: Env) -> None:
    started = time.monotonic()
    env.apps.create_namespaced_deployment(env.namespace, server_deployment(GPU_H100))
    timings: dict[str, float] = {}
    try:
        # 1. The reproduction: no operator, the CRD deleted, the finalizer forced.
        new_profile(env, "sps")
        table = live_table(env, "sps")
        control = control_config_map(env, "sps")
        env.operator.uninstall()
        env.cluster.kubectl("delete", "crd", CRD, "--wait=false")
        time.sleep(5)
        assert not crd_gone(env), "the CRD went although the profile's finalizer is pending"
        force_crd_gone(env)
        wait_collected(env, control)
        server_restarts_with(env, table)
        timings["1 uninstall, delete crd, finalizer forced"] = time.monotonic() - started

        # 2. The profile deleted with the operator running.
        install_crd(env.cluster)
        env.operator.installed = False  # uninstalled above: `start` installs it again
        new_profile(env, "sps")
        table = live_table(env, "sps")
        control = control_config_map(env, "sps")
        env.delete_profile("sps")
        wait_collected(env, control)
        cm = env.config_map(table["configMap"])
        assert cm["metadata"]["labels"].get("sps.dev/released") == "true", cm["metadata"]
        server_restarts_with(env, table)
        timings["2 delete profile, operator running"] = time.monotonic() - started

        # 3. The CRD deleted with the operator running, then the chart uninstalled.
        new_profile(env, "sps")
        table = live_table(env, "sps")
        control = control_config_map(env, "sps")
        env.cluster.kubectl("delete", "crd", CRD, "--wait=false")
        # kopf stops serving a resource whose CRD is terminating ("Non-patchable resources
        # will not be served"), so the finalizer waits here too: removed by hand.
        time.sleep(15)
        force_crd_gone(env)
        env.operator.uninstall()
        wait_collected(env, control)
        server_restarts_with(env, table)
        timings["3 delete crd, operator running, then uninstall"] = time.monotonic() - started
    finally:
        print(f"uninstall orders: cumulative seconds {timings}")
        if not crd_gone(env):
            env.cluster.kubectl("delete", "crd", CRD, "--wait=false", check=False)
            force_crd_gone(env)
        install_crd(env.cluster)
