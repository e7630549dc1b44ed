"""A LeaderWorkerSet target on the real bed with LWS installed (issue 34 §3, second bed:
tests/run-all.sh `second_bed`): a one-pod group whose leader and worker templates both run
the SGLang stand-in is profiled (a single-node server: the multi-node clone is another
branch's), its table goes into BOTH templates through the real LWS API (server-side apply of
a custom resource, LWS's webhooks in the way), LWS rolls the group, and the leader's server
reports the table. Status names the kind.

Then a group of two pods (leader + worker, 2 simulated GPUs each, `--nnodes 2` over them as
SGLang's chart starts one): a two-pod clone profiles it, the table goes into both
templates, both pods carry the hash and the leader's server reports it; moved to the H200
product it is profiled again there and goes live on it. The bed's 2 H100 and 2 H200 nodes
of 8 GPUs each hold the group (4 GPUs) beside its clone (4 GPUs)."""

from __future__ import annotations

import copy
from typing import Any, cast

import httpx
import pytest
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
    table_for,
    tables,
    wait_ready,
)

from sps_operator.constants import GPU_PRODUCT_LABEL, GPU_RESOURCE
from sps_sim.costmodel import GPU_H100, GPU_H200
from sps_testbed.lws import API_VERSION, NAME_LABEL, WORKER_INDEX_LABEL, LwsSetup
from waiting import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.slow]

TABLE_FLAG = "--speculative-dspark-sps-table-path"
LWS_GROUP, LWS_VERSION, LWS_PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"


def server_group(gpu: str, name: str = "group") -> dict[str, Any]:
    """The e2e server as a LeaderWorkerSet of one-pod groups with both templates (as
    SGLang's chart renders its lws mode; size 1 keeps the profiling clone single-node)."""
    template = server_deployment(gpu)["spec"]["template"]
    template["metadata"] = {"labels": {"app": "sglang"}}
    return {
        "apiVersion": API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "labels": {"app": "sglang"}},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 1,
                "leaderTemplate": copy.deepcopy(template),
                "workerTemplate": copy.deepcopy(template),
            },
        },
    }


def two_node_group(gpu: str, name: str = "pair") -> dict[str, Any]:
    """A LeaderWorkerSet of one group of 2 pods: tp 4 over two pods of 2 GPUs, the rank and
    the leader's address from what LWS's pod webhook injects (tests/realnode/
    test_realnode_lws.py); only the leader serves HTTP, so only its template is probed."""
    lws = server_group(gpu, name)
    lwt = lws["spec"]["leaderWorkerTemplate"]
    lwt["size"] = 2
    for role in ("leaderTemplate", "workerTemplate"):
        (container,) = lwt[role]["spec"]["containers"]
        args = container["args"]
        args[args.index("--tp") + 1] = "4"
        args += ["--nnodes", "2", "--node-rank", "$(LWS_WORKER_INDEX)",
                 "--dist-init-addr", "$(LWS_LEADER_ADDRESS):5000"]  # fmt: skip
        container["env"].append({"name": "SPS_SIM_GROUP_JOIN_TIMEOUT", "value": "120"})
        container["resources"] = {"limits": {GPU_RESOURCE: "2"}}
    (worker,) = lwt["workerTemplate"]["spec"]["containers"]
    del worker["ports"], worker["readinessProbe"]
    return lws


def leader_worker_set(env: Env, name: str) -> dict[str, Any]:
    got = env.custom.get_namespaced_custom_object(
        LWS_GROUP, LWS_VERSION, env.namespace, LWS_PLURAL, name
    )
    return cast(dict[str, Any], got)


def served_by(template: dict[str, Any], table: dict[str, Any]) -> bool:
    (container,) = template["spec"]["containers"]
    volumes = template["spec"].get("volumes") or []
    return (
        (template["metadata"].get("annotations") or {}).get("sps.dev/table-hash") == table["hash"]
        and container["args"][-2:] == [TABLE_FLAG, TABLE_PATH]
        and any((v.get("configMap") or {}).get("name") == table["configMap"] for v in volumes)
    )


def test_e2e_a_leader_worker_set_gets_its_table_in_both_templates_and_live(
    realnode_lws: LwsSetup, env: Env
) -> None:
    env.custom.create_namespaced_custom_object(
        LWS_GROUP, LWS_VERSION, env.namespace, LWS_PLURAL, server_group(GPU_H100)
    )
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL,
                                               sps_profile())  # fmt: skip
    env.operator.start()
    wait_ready(env, timeout=300)
    (table,) = tables(env)
    (target,) = env.profile()["status"]["targets"]
    assert (target["deployment"], target["kind"], target["state"]) == (
        "group", "LeaderWorkerSet", "Live"), target  # fmt: skip

    lws = leader_worker_set(env, "group")
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert served_by(lwt["leaderTemplate"], table) and served_by(lwt["workerTemplate"], table)
    assert lws["metadata"]["annotations"]["sps.dev/owner"] == "sps"

    # LWS rolled the group: its leader pod carries the hash and its server reports the table.
    def leader() -> dict[str, Any] | None:
        for pod in env.pods(f"{NAME_LABEL}=group"):
            hashed = (pod["metadata"].get("annotations") or {}).get("sps.dev/table-hash")
            if hashed == table["hash"] and ready_true(pod):
                return pod
        return None

    pod = wait_for("the group's leader live", leader, timeout=120)
    info = httpx.get(f"http://{pod['status']['podIP']}:30000/server_info", timeout=10).json()
    assert info["speculative_dspark_sps_table_path"] == TABLE_PATH, info
    assert info["sps_table"]["source"] == "path", info["sps_table"]
    assert "Target LeaderWorkerSet group: Live" in kubectl_sps(env, "explain", "sps")


def group_live_on(env: Env, table: dict[str, Any], gpu: str) -> dict[str, dict[str, Any]] | None:
    """The group's two pods by worker index ("0": the leader) once both are Ready, carry the
    table's hash and run on nodes of `gpu`; None before."""
    pods = {
        p["metadata"]["labels"].get(WORKER_INDEX_LABEL, "?"): p
        for p in env.pods(f"{NAME_LABEL}=pair")
    }
    products = env.cluster.nodes_with_product(gpu)
    if set(pods) != {"0", "1"}:
        return None
    for pod in pods.values():
        hashed = (pod["metadata"].get("annotations") or {}).get("sps.dev/table-hash")
        if (
            hashed != table["hash"]
            or not ready_true(pod)
            or pod["spec"]["nodeName"] not in products
        ):
            return None
    return pods


def confirmed_live(env: Env, table: dict[str, Any]) -> dict[str, Any] | None:
    """The target once Live on `table` and its leader's server confirmed the table."""
    (target,) = env.profile()["status"]["targets"]
    servers = target.get("servers") or ""
    if (
        target["state"] == "Live"
        and target.get("hash") == table["hash"]
        and servers.startswith("1 of 1 serving pods' servers confirm")
    ):
        return dict(target)
    return None


def test_e2e_a_two_pod_group_is_profiled_by_a_two_pod_clone_rolled_and_reprofiled_on_a_move(
    realnode_lws: LwsSetup, env: Env
) -> None:
    env.custom.create_namespaced_custom_object(
        LWS_GROUP, LWS_VERSION, env.namespace, LWS_PLURAL, two_node_group(GPU_H100)
    )
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL,
                                               sps_profile())  # fmt: skip
    env.operator.start()
    wait_ready(env, timeout=420)
    (h100,) = tables(env)
    assert h100["gpuProduct"] == GPU_H100
    # The clone was a group of two pods pinned to the product (an Indexed Job).
    (job,) = [j for j in env.jobs() if j["metadata"]["name"] == h100["run"]]
    spec = job["spec"]
    assert (spec["completionMode"], spec["parallelism"], spec["completions"]) == ("Indexed", 2, 2)
    assert spec["template"]["spec"]["nodeSelector"][GPU_PRODUCT_LABEL] == GPU_H100

    lws = leader_worker_set(env, "pair")
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert served_by(lwt["leaderTemplate"], h100) and served_by(lwt["workerTemplate"], h100)

    # LWS rolled the group: both pods carry the hash; the leader serves the group's table.
    pods = wait_for("the group live on H100", lambda: group_live_on(env, h100, GPU_H100),
                    timeout=180)  # fmt: skip
    info = httpx.get(f"http://{pods['0']['status']['podIP']}:30000/server_info", timeout=10)
    body = info.json()
    assert (body["nnodes"], body["world_size"]) == (2, 4), body
    assert body["speculative_dspark_sps_table_path"] == TABLE_PATH, body
    assert body["sps_table"]["loaded"] is True and body["sps_table"]["source"] == "path", body
    target = wait_for("the leader's confirmation", lambda: confirmed_live(env, h100), timeout=60)
    assert (target["deployment"], target["kind"]) == ("pair", "LeaderWorkerSet"), target
    assert "Target LeaderWorkerSet pair: Live" in kubectl_sps(env, "explain", "sps")

    # Moved to the H200 product (both templates, as a user moves a group): a new run there.
    on_h200 = {"spec": {"nodeSelector": {GPU_PRODUCT_LABEL: GPU_H200}}}
    move = {
        "spec": {"leaderWorkerTemplate": {"leaderTemplate": on_h200, "workerTemplate": on_h200}}
    }
    env.custom.patch_namespaced_custom_object(
        LWS_GROUP, LWS_VERSION, env.namespace, LWS_PLURAL, "pair", move
    )
    h200 = wait_for("an H200 table", lambda: table_for(env, GPU_H200), timeout=420)
    assert h200["fingerprint"] == h100["fingerprint"] and h200["hash"] != h100["hash"]
    assert h200["run"] != h100["run"]
    pods = wait_for("the group live on H200", lambda: group_live_on(env, h200, GPU_H200),
                    timeout=240)  # fmt: skip
    info = httpx.get(f"http://{pods['0']['status']['podIP']}:30000/server_info", timeout=10)
    assert info.json()["sps_sim"]["preset"] == GPU_H200, info.json()
    target = wait_for("Live on H200", lambda: confirmed_live(env, h200), timeout=120)
    assert target["gpuProduct"] == GPU_H200, target
