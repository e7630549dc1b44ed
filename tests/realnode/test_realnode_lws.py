"""LeaderWorkerSet on the real bed (issue 34 §3): the manager from its image in lws-system,
its own webhooks and certificates; a LeaderWorkerSet of size 2 (leader + 1 worker) of the
bed's SGLang stand-in, 2 simulated GPUs per pod on two H100 nodes, started the way SGLang's
Helm chart starts a multi-node server (`--nnodes 2 --node-rank $(LWS_WORKER_INDEX)
--dist-init-addr $(LWS_LEADER_ADDRESS):PORT`), forms its group; a group whose ranks load
different tables fails at start, as SGLang's does.

Its own bed (tests/run-all.sh `second_bed`): the one Kueue's tests use, so that a test of an
LWS target queued through Kueue later finds both there, and LWS is installed in one bed only.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from realnode_helpers import RESTRICTED_CONTAINER, apply, get_json

from sps_operator.api.hashing import content_hash
from sps_operator.constants import GPU_PRODUCT_LABEL, GPU_RESOURCE
from sps_sim.costmodel import GPU_H100
from sps_testbed import KubectlError, RealNodeCluster
from sps_testbed.kueue import condition
from sps_testbed.lws import (
    API_VERSION,
    GROUP_INDEX_LABEL,
    GROUP_KEY_LABEL,
    NAME_LABEL,
    NAMESPACE,
    WEBHOOK_SECRET,
    WORKER_INDEX_LABEL,
    LwsSetup,
    probe_manifest,
)
from waiting import wait_for

HTTP_PORT = 30000
DIST_PORT = 5000
TABLE_PATH = "/sps/table.json"
TABLE = '{"sample_batch_tokens":[8,64],"sample_steps_per_sec":[100.0,50.0],"max_batch_tokens":64}'
OTHER = '{"sample_batch_tokens":[8,64],"sample_steps_per_sec":[90.0,40.0],"max_batch_tokens":64}'


def server_pod(image: str, table_config_map: str, *, leader: bool) -> dict[str, Any]:
    """A pod template of the group: tp 4 over two nodes of 2 GPUs, the rank and the leader's
    address from what LWS's pod webhook injects; only the leader serves HTTP (probed)."""
    container: dict[str, Any] = {
        "name": "sglang",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": (
            "--model-path sim/dspark-8b --tp 4 --speculative-algorithm DSPARK"
            " --speculative-dspark-block-size 3 --cuda-graph-max-bs 16 --max-running-requests 16"
            f" --speculative-dspark-sps-table-path {TABLE_PATH} --host 0.0.0.0 --port {HTTP_PORT}"
            " --nnodes 2 --node-rank $(LWS_WORKER_INDEX)"
            f" --dist-init-addr $(LWS_LEADER_ADDRESS):{DIST_PORT}"
        ).split(),
        "env": [
            {"name": "SGLANG_RAGGED_VERIFY_MODE", "value": "compact"},
            {"name": "SPS_SIM_TIME_SCALE", "value": "40"},
            {"name": "SPS_SIM_GROUP_JOIN_TIMEOUT", "value": "120"},
        ],
        "resources": {"limits": {GPU_RESOURCE: "2"}},
        "securityContext": RESTRICTED_CONTAINER,
        "volumeMounts": [{"name": "sps-table", "mountPath": "/sps", "readOnly": True}],
    }
    if leader:
        container["ports"] = [{"containerPort": HTTP_PORT, "name": "http"}]
        container["readinessProbe"] = {
            "httpGet": {"path": "/health", "port": HTTP_PORT},
            "periodSeconds": 1,
        }
    return {
        "spec": {
            "nodeSelector": {GPU_PRODUCT_LABEL: GPU_H100},
            # One node per rank, as a multi-node server runs (the test's one group is the
            # LeaderWorkerSet's only pods).
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {
                                "matchExpressions": [{"key": NAME_LABEL, "operator": "Exists"}]
                            },
                            "topologyKey": "kubernetes.io/hostname",
                        }
                    ]
                }
            },
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
            "volumes": [{"name": "sps-table", "configMap": {"name": table_config_map}}],
        }
    }


def leader_worker_set(
    name: str, image: str, leader_table: str, worker_table: str, restart_policy: str | None
) -> dict[str, Any]:
    template: dict[str, Any] = {
        "size": 2,
        "leaderTemplate": server_pod(image, leader_table, leader=True),
        "workerTemplate": server_pod(image, worker_table, leader=False),
    }
    if restart_policy:
        template["restartPolicy"] = restart_policy
    return {
        "apiVersion": API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "leaderWorkerTemplate": template},
    }


def table_config_map(name: str, text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"table.json": text},
    }


def group_pods(bed: RealNodeCluster, ns: str, name: str) -> dict[str, dict[str, Any]]:
    """The group's pods by worker index ("0": the leader)."""
    pods = get_json(bed, "pods", "-n", ns, "-l", f"{NAME_LABEL}={name}")["items"]
    return {
        p["metadata"]["labels"].get(WORKER_INDEX_LABEL, "?"): p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
    }


def ready(pod: dict[str, Any]) -> bool:
    return condition(pod, "Ready").get("status") == "True"


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def log_of(bed: RealNodeCluster, ns: str, pod: str) -> str:
    """The container's log, and its previous run's when it restarted."""
    now = bed.kubectl("logs", "-n", ns, pod, check=False)
    before = bed.kubectl("logs", "-n", ns, pod, "--previous", check=False)
    return f"{before}\n{now}"


def test_a_two_node_group_forms_on_real_kubelets_and_its_leader_reports_it(
    realnode_cluster: RealNodeCluster, realnode_lws: LwsSetup, realnode_namespace: str
) -> None:
    bed, ns = realnode_cluster, realnode_namespace
    apply(bed, ns, table_config_map("table", TABLE))
    apply(bed, ns, leader_worker_set("group", bed.image("sglang"), "table", "table", None))

    def both_ready() -> dict[str, dict[str, Any]] | None:
        pods = group_pods(bed, ns, "group")
        return pods if set(pods) == {"0", "1"} and all(map(ready, pods.values())) else None

    pods = wait_for("the leader and its worker Ready", both_ready, timeout=240)
    leader, worker = pods["0"], pods["1"]

    # LWS's defaulting webhook filled what the CRD leaves open; its validating one let it in.
    stored = get_json(bed, "leaderworkerset", "group", "-n", ns)
    assert stored["spec"]["networkConfig"]["subdomainPolicy"] == "Shared"
    assert stored["spec"]["rolloutStrategy"]["type"] == "RollingUpdate"
    assert stored["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    # Its pod webhook labelled both pods of the group and gave them the group's addresses.
    assert leader["metadata"]["labels"][GROUP_INDEX_LABEL] == "0"
    assert leader["metadata"]["labels"][GROUP_KEY_LABEL]
    assert (
        worker["metadata"]["labels"][GROUP_KEY_LABEL]
        == leader["metadata"]["labels"][GROUP_KEY_LABEL]
    )
    leader_address = f"group-0.group.{ns}"
    for index, pod in pods.items():
        env = env_of(pod)
        assert env["LWS_LEADER_ADDRESS"] == leader_address, env
        assert env["LWS_WORKER_INDEX"] == index and env["LWS_GROUP_SIZE"] == "2", env

    # Two GPUs each, of the product asked for, on two different nodes.
    nodes = {index: get_json(bed, "node", pod["spec"]["nodeName"]) for index, pod in pods.items()}
    assert len({n["metadata"]["name"] for n in nodes.values()}) == 2, pods
    for node in nodes.values():
        assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == GPU_H100
    for pod in pods.values():
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["limits"][GPU_RESOURCE] == "2"

    # The leader serves the group's /server_info: two nodes, tp 4 over them, the table
    # every rank loaded (checked by rank 0 at start).
    info = httpx.get(f"http://{leader['status']['podIP']}:{HTTP_PORT}/server_info", timeout=10)
    info.raise_for_status()
    body = info.json()
    assert (body["nnodes"], body["node_rank"], body["world_size"]) == (2, 0, 4), body
    assert body["dist_init_addr"] == f"{leader_address}:{DIST_PORT}"
    assert body["sps_table"]["loaded"] is True and body["sps_table"]["sha256"] == content_hash(
        TABLE
    ), body["sps_table"]
    assert "all 2 node ranks joined" in log_of(bed, ns, leader["metadata"]["name"])
    assert "node rank 1 joined the group of 2" in log_of(bed, ns, worker["metadata"]["name"])
    # No rank restarted in place on the way.
    for pod in pods.values():
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, pod["status"]
    lws_status = get_json(bed, "leaderworkerset", "group", "-n", ns)
    assert condition(lws_status, "Available").get("status") == "True", lws_status.get("status")


def test_a_group_whose_ranks_load_different_tables_fails_at_start(
    realnode_cluster: RealNodeCluster, realnode_lws: LwsSetup, realnode_namespace: str
) -> None:
    bed, ns = realnode_cluster, realnode_namespace
    apply(bed, ns, table_config_map("table-a", TABLE), table_config_map("table-b", OTHER))
    # restartPolicy None: LWS restarts the failed containers in place instead of recreating
    # the group, so their logs stay to read.
    apply(bed, ns, leader_worker_set("split", bed.image("sglang"), "table-a", "table-b", "None"))
    why = f"node rank 1 loaded SPS table {content_hash(OTHER)} but node rank 0 loaded " + (
        content_hash(TABLE)
    )

    def both_said_why() -> dict[str, str] | None:
        pods = group_pods(bed, ns, "split")
        if set(pods) != {"0", "1"}:
            return None
        logs = {i: log_of(bed, ns, p["metadata"]["name"]) for i, p in pods.items()}
        return logs if all(why in log for log in logs.values()) else None

    logs = wait_for("both ranks to fail saying why", both_said_why, timeout=240)
    assert "sps-sim: error: node rank 0:" in logs["0"] and "same table bytes" in logs["0"]
    assert "sps-sim: error: node rank 1:" in logs["1"]

    def exited_1(pod: dict[str, Any]) -> bool:
        """Its container ended with exit code 1, now or in its previous run (the kubelet
        reports it a moment after the log line)."""
        return any(
            ((s.get(when) or {}).get("terminated") or {}).get("exitCode") == 1
            for s in pod["status"].get("containerStatuses") or []
            for when in ("state", "lastState")
        )

    pods = wait_for(
        "both ranks' containers to have exited 1",
        lambda: (p := group_pods(bed, ns, "split")) and all(map(exited_1, p.values())) and p,
        timeout=60,
    )
    assert not ready(pods["0"]), pods["0"]["status"]
    lws_status = get_json(bed, "leaderworkerset", "split", "-n", ns)
    assert condition(lws_status, "Available").get("status") != "True", lws_status.get("status")


def test_lws_webhooks_serve_with_certificates_of_its_own(
    realnode_cluster: RealNodeCluster, realnode_lws: LwsSetup
) -> None:
    bed = realnode_cluster
    # LWS's internal certificate management filled the Secret (shipped empty) and put its CA
    # into both webhook configurations (not into the CRD's conversion webhook, which the API
    # server never calls: the CRD serves v1 alone).
    secret = get_json(bed, "secret", WEBHOOK_SECRET, "-n", NAMESPACE)["data"]
    assert {"ca.crt", "tls.crt", "tls.key"} <= set(secret), sorted(secret)
    ca_pem = base64.b64decode(secret["ca.crt"])
    for kind in ("mutating", "validating"):
        config = get_json(bed, f"{kind}webhookconfiguration", f"lws-{kind}-webhook-configuration")
        bundles = {base64.b64decode(w["clientConfig"]["caBundle"]) for w in config["webhooks"]}
        assert bundles == {ca_pem}, kind
    crd = get_json(bed, "crd", "leaderworkersets.leaderworkerset.x-k8s.io")
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1"]
    manager = get_json(bed, "deployment", "lws-controller-manager", "-n", NAMESPACE)
    (container,) = manager["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"registry.k8s.io/lws/lws:{realnode_lws.version}"
    # The validating webhook refuses what only LWS checks (the CRD's schema allows it),
    # with LWS's words.
    stalled = probe_manifest("default")
    stalled["spec"]["rolloutStrategy"] = {
        "type": "RollingUpdate",
        "rollingUpdateConfiguration": {"maxUnavailable": 0, "maxSurge": 0},
    }
    with pytest.raises(KubectlError) as refused:
        bed.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(stalled))
    message = refused.value.stderr
    assert 'admission webhook "vleaderworkerset.kb.io" denied the request' in message, message
    assert "must not be 0 when `maxSurge` is 0" in message, message
