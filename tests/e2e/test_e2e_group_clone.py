"""The operator profiles a multi-node server with a group clone, end to end on the bed
(issue 34 §2): the chart's RBAC lets it create the group's headless Service, the Indexed
Job forms its two ranks, rank 0's profiler measures, the table is published, and the
profile's deletion takes the Service with it.

The target is Deployment-shaped (the workload-kind adapter for LeaderWorkerSets is
another part's): rank 0 of a two-node server (`--nnodes 2`, tp 2 over two pods of 1 GPU)
whose rank 1 never comes, so it stays placed and unready; `rollout.mode: Disabled` (a
table rolled onto one rank of a group would not serve)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from e2e_env import Env, create, server_deployment, sps_profile
from kubernetes.client.rest import ApiException

from sps_operator.api import labels as L
from sps_operator.controller.kube import group_clone, names
from sps_operator.tables.formats import SpsCostTable, load_sps_table_text
from sps_sim.costmodel import GPU_H100
from waiting import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.e2e, pytest.mark.slow, pytest.mark.bed_shared]

GROUP_ARGS = ["--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:5000"]


def rank0_deployment() -> dict[str, Any]:
    dep = server_deployment(GPU_H100, env={"SPS_SIM_GROUP_JOIN_TIMEOUT": "3600"})
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    container["args"] = [*container["args"], *GROUP_ARGS]
    container["args"][container["args"].index("--tp") + 1] = "2"
    return dep


def service_of(env: Env, name: str) -> dict[str, Any] | None:
    try:
        resp = env.core.read_namespaced_service(name, env.namespace, _preload_content=False)
        return dict(json.loads(resp.data))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_e2e_a_multi_node_server_is_profiled_by_a_group_clone(env: Env) -> None:
    create(env, rank0_deployment(), sps_profile(rollout={"mode": "Disabled"}))
    env.operator.start()

    def group_job() -> dict[str, Any] | None:
        failure = env.operator.failure() or (env.profile().get("status") or {}).get("lastFailure")
        if failure:
            raise AssertionError(f"{failure}\n{env.diagnostics()}")
        return next(iter(env.jobs()), None)

    job = wait_for("the group's Job", group_job, timeout=180)
    spec = job["spec"]
    assert (spec["completionMode"], spec["parallelism"], spec["completions"]) == ("Indexed", 2, 2)
    service_name = names.group_service(job["metadata"]["name"])
    # Created right after the Job, and owned by it (the garbage collector takes it along).
    service = wait_for("the group's Service", lambda: service_of(env, service_name), timeout=30)
    assert service["spec"]["clusterIP"] == "None"
    owners = service["metadata"]["ownerReferences"]
    assert [(o["kind"], o["uid"]) for o in owners] == [("Job", job["metadata"]["uid"])]
    assert service["metadata"]["labels"][L.LABEL_COMPONENT] == L.COMPONENT_GROUP_SERVICE

    def table_ready() -> list[dict[str, Any]] | None:
        status = env.profile().get("status") or {}
        if status.get("lastFailure"):
            raise AssertionError(f"{status['lastFailure']}\n{env.diagnostics()}")
        return status.get("tables") or None

    (table,) = wait_for("the group's table", table_ready, timeout=420)
    assert table["run"] == job["metadata"]["name"] and table["gpuProduct"] == GPU_H100
    loaded = load_sps_table_text(env.config_map(table["configMap"])["data"]["table.json"])
    assert isinstance(loaded, SpsCostTable) and all(s > 0 for s in loaded.sample_steps_per_sec)
    (done,) = env.jobs()
    assert done["status"].get("completedIndexes") == "0", done["status"]
    assert table["gpuSeconds"] > 0

    # The worker ends with the group; the profile's deletion takes the Service.
    wait_for(
        "no rank left running",
        lambda: (
            not [
                p
                for p in env.pods(f"{group_clone.JOB_NAME_LABEL}={job['metadata']['name']}")
                if p["status"].get("phase") == "Running"
            ]
        ),
        timeout=120,
    )
    env.delete_profile()
    wait_for("the Service gone with the profile", lambda: service_of(env, service_name) is None)
