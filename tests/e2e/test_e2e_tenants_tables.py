"""A table is its bytes, and status says what the servers run (issue 33 §1–§3), on the
real bed: a tenant with the built-in `edit` role in its namespace only (a client
certificate signed by the bed's CA, `e2e_tenants.Tenant`) attacks its own profile's
tables and servers through the API server's RBAC and admission.

One test plays three attacks, shortest first:
- AnnotateOnly into kube-root-ca.crt: refused at admission (the CRD's CEL rule);
- a subPath mount of the tenant's own file over the table path: the target is refused
  (TableMountShadowed), never profiled, never reported live;
- the live table ConfigMap deleted and recreated under its name with 3x the steps/s,
  labels consistent with the new bytes and an ownerReference to the profile: the operator
  refuses it (TableModified, an event), measures again, replaces the forged object with
  the measured bytes, and the profile is Ready on them.
The rollback to a forged previous table after a failed rollout (which needs a rollout to
fail on cue) is played in-process: tests/unit/test_controller_tenant_tables.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from e2e_env import (
    TABLE_PATH,
    Env,
    rolled_to,
    server_deployment,
    sps_profile,
    table_for,
    wait_ready,
)
from e2e_tenants import Tenant

from sps_operator.api import labels as L
from sps_operator.api.hashing import content_hash
from sps_sim.costmodel import GPU_H100
from sps_testbed.cluster import KubectlError
from waiting import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.slow]

Obj = dict[str, Any]


def selecting(deployment: str) -> Obj:
    return {"matchLabels": {"deploy": deployment}}


def shadowed_server() -> Obj:
    """The tenant's own table file mounted (subPath) where the operator injects its table."""
    dep = server_deployment(GPU_H100, name="shadowed")
    dep["spec"]["replicas"] = 0  # its template is what is judged; no GPU is taken
    pod = dep["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "mine", "configMap": {"name": "my-fast-table"}}]
    pod["containers"][0]["volumeMounts"] = [
        {"name": "mine", "mountPath": TABLE_PATH, "subPath": "table.json"}
    ]
    return dep


def recreate_forged(tenant: Tenant, name: str, speedup: float = 3.0) -> str:
    """As the tenant: delete the immutable table ConfigMap and create it again under the
    same name with `speedup` times the steps/s, labels consistent with the new bytes and
    the same ownerReference. Returns the forged bytes' hash."""
    cm = tenant.get("configmap", name)
    assert cm is not None, name
    table = json.loads(cm["data"][L.TABLE_KEY])
    table["sample_steps_per_sec"] = [v * speedup for v in table["sample_steps_per_sec"]]
    text = json.dumps(table)
    meta = cm["metadata"]
    forged = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {**meta.get("labels", {}), L.LABEL_TABLE_HASH: content_hash(text)},
            "annotations": meta.get("annotations", {}),
            # blockOwnerDeletion would need update on the profile's finalizers, which
            # `edit` lacks; the reference is the same claim without it.
            "ownerReferences": [
                {k: v for k, v in ref.items() if k != "blockOwnerDeletion"}
                for ref in meta.get("ownerReferences", [])
            ],
        },
        "immutable": True,
        "data": {**cm["data"], L.TABLE_KEY: text},
    }
    tenant.delete("configmap", name)
    tenant.create(forged)
    return content_hash(text)


def target_of(env: Env, profile: str) -> Obj:
    status = env.profile(profile).get("status") or {}
    return next(iter(status.get("targets") or []), {})


def events(env: Env, reason: str) -> list[str]:
    listed = env.core.list_namespaced_event(env.namespace)
    return [e.message or "" for e in listed.items if e.reason == reason]


def test_e2e_a_tenant_cannot_make_status_lie_about_its_tables(env: Env, tmp_path: Path) -> None:
    env.operator.start()  # the chart aggregates the SpsProfile rights into `edit`
    tenant = Tenant.enrol(env.cluster, env.namespace, tmp_path)

    # 1. A ConfigMap the cluster writes itself is refused before any fight can start.
    rollout = {"mode": "AnnotateOnly", "tableConfigMap": "kube-root-ca.crt"}
    root_ca = sps_profile(name="root-ca", selector=selecting("nothing"), rollout=rollout)
    with pytest.raises(KubectlError, match="the cluster writes itself"):
        tenant.create(root_ca)

    # 2. A mount of the tenant's own over the table path: refused, never profiled.
    tenant.create(server_deployment(GPU_H100), shadowed_server())
    tenant.create(sps_profile(name="sps", selector=selecting("server")),
                  sps_profile(name="shadow", selector=selecting("shadowed")))  # fmt: skip
    refused = wait_for(
        "the shadowed target refused",
        lambda: (t := target_of(env, "shadow")).get("reason") == "TableMountShadowed" and t,
        timeout=120,
    )
    assert TABLE_PATH in refused["message"] or "/etc/sps/table" in refused["message"]

    # 3. The live table recreated with 3x the steps/s: refused, measured again, replaced.
    wait_ready(env)
    table = table_for(env, GPU_H100)
    assert table is not None
    wait_for("rolled", lambda: rolled_to(env, table["hash"]), timeout=120)
    forged = recreate_forged(tenant, table["configMap"])
    wait_for("TableModified event", lambda: events(env, "TableModified"), timeout=120)

    def measured_bytes_back() -> bool:
        cm = tenant.get("configmap", table["configMap"]) or {}
        text = (cm.get("data") or {}).get(L.TABLE_KEY) or ""
        live = table_for(env, GPU_H100)
        return (
            content_hash(text) != forged
            and live is not None
            and content_hash(text) == live["hash"]
            and env.condition("Ready").get("status") == "True"
        )

    wait_for("the forged table replaced by measured bytes", measured_bytes_back, timeout=400)
    live = table_for(env, GPU_H100)
    assert live is not None and live["hash"] != forged
    wait_for("rolled onto the measured table", lambda: rolled_to(env, live["hash"]), timeout=120)
    assert target_of(env, "shadow").get("reason") == "TableMountShadowed"
    status = env.profile("shadow").get("status") or {}
    assert not status.get("tables") and not status.get("currentRun")
