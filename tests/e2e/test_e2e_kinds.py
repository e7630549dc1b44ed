"""Targets of other kinds than Deployments on the real bed (issue 34 §3): a StatefulSet of
two replicas selected by a profile gets its table profiled, rolled into its template under
the StatefulSet's own RollingUpdate, and live on real kubelets: every pod carries the
table's hash and its server reports the table. Status and `kubectl sps explain` name the
kind."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import yaml
from e2e_env import (
    GROUP,
    PLURAL,
    TABLE_PATH,
    VERSION,
    Env,
    kubectl_sps,
    ready_true,
    server_deployment,
    sps_profile,
    tables,
    wait_ready,
)

from sps_sim.costmodel import GPU_H100
from waiting import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.slow, pytest.mark.bed_shared]

TABLE_FLAG = "--speculative-dspark-sps-table-path"


def server_stateful_set(gpu: str, name: str = "server", replicas: int = 2) -> dict[str, Any]:
    """The e2e server as a StatefulSet (its pods in parallel: no reason to wait for each)."""
    dep = server_deployment(gpu, name=name)
    spec = dep["spec"]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": dep["metadata"],
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": spec["selector"],
            "template": spec["template"],
        },
    }


def live_pods(env: Env, table_hash: str, count: int) -> list[dict[str, Any]] | None:
    pods = [
        p
        for p in env.pods("deploy=server")
        if not p["metadata"].get("deletionTimestamp") and ready_true(p)
    ]
    if len(pods) != count:
        return None
    hashes = {(p["metadata"].get("annotations") or {}).get("sps.dev/table-hash") for p in pods}
    return pods if hashes == {table_hash} else None


def test_e2e_a_stateful_set_of_two_replicas_gets_its_table_live(env: Env) -> None:
    env.apps.create_namespaced_stateful_set(env.namespace, server_stateful_set(GPU_H100))
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL,
                                               sps_profile())  # fmt: skip
    env.operator.start()
    manifest = env.cluster.helm("get", "manifest", env.operator.name,
                                "--namespace", env.operator.namespace)  # fmt: skip
    (account,) = [d["metadata"]["name"] for d in yaml.safe_load_all(manifest)
                  if d and d["kind"] == "ServiceAccount"]  # fmt: skip
    for verb, where, allowed in [("patch", env.namespace, "yes"), ("patch", "default", "no")]:
        out = env.cluster.kubectl(
            "auth", "can-i", verb, "statefulsets", "-n", where,
            f"--as=system:serviceaccount:{env.operator.namespace}:{account}", check=False,
        )  # fmt: skip
        assert out.strip() == allowed, (verb, where, out)

    wait_ready(env, timeout=300)
    (table,) = tables(env)
    assert table["gpuProduct"] == GPU_H100
    (target,) = env.profile()["status"]["targets"]
    assert (target["deployment"], target["kind"], target["state"]) == (
        "server", "StatefulSet", "Live"), target  # fmt: skip
    assert target["table"] == table["configMap"]

    # The table went into the StatefulSet's template, and its own controller rolled it.
    sts = env.apps.read_namespaced_stateful_set("server", env.namespace)
    template = sts.spec.template
    assert template.metadata.annotations["sps.dev/table-hash"] == table["hash"]
    (container,) = template.spec.containers
    assert container.args[-2:] == [TABLE_FLAG, TABLE_PATH]
    assert any(v.config_map and v.config_map.name == table["configMap"]
               for v in template.spec.volumes)  # fmt: skip
    assert sts.status.current_revision == sts.status.update_revision
    assert (sts.metadata.annotations or {}).get("sps.dev/owner") == "sps"

    # Live on real kubelets: both pods are ready, carry the table's hash, and their
    # servers report the table they loaded.
    pods = wait_for("both pods live", lambda: live_pods(env, table["hash"], 2), timeout=120)
    for pod in pods:
        info = httpx.get(f"http://{pod['status']['podIP']}:30000/server_info", timeout=10).json()
        assert info["speculative_dspark_sps_table_path"] == TABLE_PATH, info
        assert info["sps_table"]["source"] == "path", info["sps_table"]

    explained = kubectl_sps(env, "explain", "sps")
    assert "Target StatefulSet server: Live" in explained, explained
    wide = kubectl_sps(env, "get", "-o", "wide")
    assert "StatefulSet" in wide, wide

    # A profile that names LeaderWorkerSets where the bed has no LWS (this bed installs it
    # only `--with lws`) says so in the next pass, asking the API server's discovery; the
    # StatefulSet stays live. (On a bed with LWS, nothing is said.)
    served = bool(env.cluster.kubectl("api-resources", "--api-group=leaderworkerset.x-k8s.io",
                                      "-o", "name", check=False).strip())  # fmt: skip
    kinds = {"spec": {"targetKinds": ["StatefulSet", "LeaderWorkerSet"]}}
    env.custom.patch_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, "sps", kinds)

    def said() -> dict[str, Any] | None:
        c = env.condition("Degraded")
        return c if (c.get("reason") == "KindNotInstalled") != served else None

    degraded = wait_for("Degraded says whether LWS is served", said, timeout=60)
    if not served:
        assert degraded["status"] == "True" and "LeaderWorkerSet" in degraded["message"]
    (target,) = env.profile()["status"]["targets"]
    assert (target["kind"], target["state"]) == ("StatefulSet", "Live"), target
