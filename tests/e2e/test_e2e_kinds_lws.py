"""A LeaderWorkerSet target on the real bed with LWS installed (issue 34 §3, second bed:
tests/run-all.sh `second_bed`): a one-pod group whose leader and worker templates both run
the SGLang stand-in is profiled (a single-node server: the multi-node clone is another
branch's), its table goes into BOTH templates through the real LWS API (server-side apply of
a custom resource, LWS's webhooks in the way), LWS rolls the group, and the leader's server
reports the table. Status names the kind."""

from __future__ import annotations

import copy
from typing import Any

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
    tables,
    wait_ready,
)

from sps_sim.costmodel import GPU_H100
from sps_testbed.lws import API_VERSION, NAME_LABEL, LwsSetup
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

    lws = env.custom.get_namespaced_custom_object(
        LWS_GROUP, LWS_VERSION, env.namespace, LWS_PLURAL, "group"
    )
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
