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
from dataclasses import dataclass
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


@dataclass
class Control:
    """A ConfigMap owned by a profile alone, as an unmounted table is, and that profile's
    UID."""

    name: str
    profile_uid: str


def control_config_map(env: Env, name: str) -> Control:
    """A ConfigMap owned by profile `name` alone: once it is gone, the garbage collector
    has taken up the profile's dependents."""
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
    return Control(cm_name, profile["metadata"]["uid"])


def gone(read: Any) -> bool:
    try:
        read()
    except ApiException as exc:
        return exc.status == 404
    return False


def wait_collected(env: Env, control: Control, table: dict[str, Any]) -> None:
    """Until the collector has deleted the control ConfigMap and is done with the table's:
    its reference to the profile gone (the collector drops a reference to an owner that is
    gone from a dependent that has another, the Deployment; the finalizer, when it ran,
    dropped it before). Whatever the collector does to the table, it has done by then."""
    wait_for(
        f"the garbage collector deleted {control.name}",
        lambda: gone(lambda: env.config_map(control.name)),
        timeout=120,
    )

    def done_with_table() -> bool:
        try:
            refs = env.config_map(table["configMap"])["metadata"].get("ownerReferences") or []
        except ApiException as exc:
            if exc.status == 404:  # deleted: server_restarts_with says so
                return True
            raise
        return control.profile_uid not in {r.get("uid") for r in refs}

    wait_for(f"no reference to the gone profile on {table['configMap']}", done_with_table,
             timeout=60)  # fmt: skip


# What kopf logs once it stops serving a resource whose CRD is terminating (its patch verb
# gone), naming the resource.
STOPPED_SERVING = ("Non-patchable resources will not be served", PLURAL)


def stopped_serving_line(env: Env) -> str | None:
    """The operator's log line saying it stopped serving SpsProfiles, if there is one."""
    pods = env.operator.pods()
    log = env.operator.pod_log(pods[0]["metadata"]["name"], tail=2000) if pods else ""
    return next((ln for ln in log.splitlines() if all(t in ln for t in STOPPED_SERVING)), None)


def wait_finalizer_pending(env: Env, name: str) -> None:
    """Until the CRD's deletion has reached profile `name` (its deletionTimestamp) and its
    finalizer holds it there (and with it the CRD)."""

    def pending() -> bool:
        try:
            meta = env.profile(name)["metadata"]
        except ApiException as exc:
            if exc.status == 404:
                raise AssertionError(f"profile {name} went with no finalizer run") from None
            raise
        return bool(meta.get("deletionTimestamp")) and bool(meta.get("finalizers"))

    wait_for(f"profile {name} being deleted, its finalizer pending", pending, timeout=60)


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
        wait_finalizer_pending(env, "sps")
        assert not crd_gone(env), "the CRD went although the profile's finalizer is pending"
        force_crd_gone(env)
        wait_collected(env, control, table)
        server_restarts_with(env, table)
        timings["1 uninstall, delete crd, finalizer forced"] = time.monotonic() - started

        # 2. The profile deleted with the operator running.
        install_crd(env.cluster)
        env.operator.installed = False  # uninstalled above: `start` installs it again
        new_profile(env, "sps")
        table = live_table(env, "sps")
        control = control_config_map(env, "sps")
        env.delete_profile("sps")
        wait_collected(env, control, table)
        cm = env.config_map(table["configMap"])
        assert cm["metadata"]["labels"].get("sps.dev/released") == "true", cm["metadata"]
        server_restarts_with(env, table)
        timings["2 delete profile, operator running"] = time.monotonic() - started

        # 3. The CRD deleted with the operator running, then the chart uninstalled.
        new_profile(env, "sps")
        table = live_table(env, "sps")
        control = control_config_map(env, "sps")
        assert stopped_serving_line(env) is None, "kopf stopped serving before the deletion"
        env.cluster.kubectl("delete", "crd", CRD, "--wait=false")
        # kopf stops serving a resource whose CRD is terminating, so the finalizer waits
        # here too: removed by hand once the operator has seen the CRD go.
        wait_for("the operator stopped serving SpsProfiles", lambda: stopped_serving_line(env),
                 timeout=60, interval=1)  # fmt: skip
        force_crd_gone(env)
        env.operator.uninstall()
        wait_collected(env, control, table)
        server_restarts_with(env, table)
        timings["3 delete crd, operator running, then uninstall"] = time.monotonic() - started
    finally:
        print(f"uninstall orders: cumulative seconds {timings}")
        if not crd_gone(env):
            env.cluster.kubectl("delete", "crd", CRD, "--wait=false", check=False)
            force_crd_gone(env)
        install_crd(env.cluster)
