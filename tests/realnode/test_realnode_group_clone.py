"""The profiling clone of a multi-node server on real kubelets (issue 34 §2): the objects
the operator's builders make for a target started as SGLang's Helm chart starts a
LeaderWorkerSet's leader (`--nnodes 2 --node-rank $(LWS_WORKER_INDEX) --dist-init-addr
$(LWS_LEADER_ADDRESS):PORT`, tp 4 over two pods of 2 GPUs): an Indexed Job of two ranks
and its headless Service. Created on the bed as the run creates them, they form the
group, profile on rank 0 and end; a deleted worker fails the Job at once, naming the rank.

No LeaderWorkerSet is needed (the clone is a Job): one at a time on the first bed (4 of the
H100 pool's GPUs); its Kueue test is test_realnode_group_clone_kueue.py, on the second bed
with the add-ons.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from realnode_helpers import apply, get_json
from realnode_profiles import QUICK_SWEEP
from test_realnode_lws import HTTP_PORT, server_pod

from sps_operator.api import labels as L
from sps_operator.api.kinds import RunPhase, TableKind
from sps_operator.api.result import STATUS_SUCCEEDED, read_result
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.controller.kube import builders, group_clone
from sps_operator.controller.policies.acceptance import judge
from sps_operator.controller.policies.placement import pod_info
from sps_operator.controller.profiling.run import lost_ranks
from sps_operator.controller.sglang.serverconfig import parse_server
from sps_operator.tables.formats import load_sps_table_text
from sps_sim.costmodel import GPU_H100
from sps_testbed import RealNodeCluster
from waiting import wait_for

PROFILE_UID = "0a1b2c3d-group-clone"


def group_plan(
    bed: RealNodeCluster, ns: str, run: str, defaults: builders.JobDefaults | None = None
) -> builders.RunPlan:
    """The run plan of a profile whose target is the LWS test's leader template."""
    pod = server_pod(bed.image("sglang"), "table", leader=True)["spec"]
    spec = SpsProfileSpec.model_validate(
        {
            "selector": {"matchLabels": {"app": "group"}},
            "table": {"kind": "Diagonal", "sweep": QUICK_SWEEP},
        }
    )
    return builders.RunPlan(
        profile=builders.ProfileRef("group", ns, PROFILE_UID),
        spec=spec,
        run=run,
        phase=RunPhase.DIAGONAL,
        gpu_product=GPU_H100,
        fingerprint="f" * 16,
        target_pod_spec=pod,
        server_container="sglang",
        server=parse_server(pod["containers"][0]),
        server_port=HTTP_PORT,
        profiler_image=bed.image("operator"),
        defaults=defaults or builders.JobDefaults(),
    )


def create_run(bed: RealNodeCluster, ns: str, plan: builders.RunPlan) -> dict[str, Any]:
    """What the run creates, in its order (run._create_phase: the Service right after the
    Job that owns it); without the owner references to a profile that does not exist here
    (the garbage collector would take them) and to the Job (its UID is not known yet)."""
    job = builders.profiling_job(plan)
    objects = [
        *builders.profiler_rbac(plan),
        builders.result_config_map(plan),
        job,
        builders.group_service(plan, job_uid=""),
    ]
    for obj in objects:
        obj["metadata"].pop("ownerReferences", None)
    apply(bed, ns, *objects)
    return job


def job_pods(bed: RealNodeCluster, ns: str, job: str) -> dict[str, dict[str, Any]]:
    """The Job's pods that are not being deleted, by completion index."""
    items = get_json(bed, "pods", "-n", ns, "-l", f"{group_clone.JOB_NAME_LABEL}={job}")["items"]
    return {
        p["metadata"]["labels"][group_clone.COMPLETION_INDEX_LABEL]: p
        for p in items
        if not p["metadata"].get("deletionTimestamp")
    }


def running(pod: dict[str, Any]) -> bool:
    return pod["status"].get("phase") == "Running"


def job_condition(bed: RealNodeCluster, ns: str, job: str, *types: str) -> dict[str, Any] | None:
    status = get_json(bed, "job", job, "-n", ns).get("status") or {}
    return next(
        (
            c
            for c in status.get("conditions") or []
            if c.get("type") in types and c.get("status") == "True"
        ),
        None,
    )


def log_of(bed: RealNodeCluster, ns: str, pod: str, container: str) -> str:
    return bed.kubectl("logs", "-n", ns, pod, "-c", container, check=False)


def group_formed(bed: RealNodeCluster, ns: str, job: str) -> dict[str, dict[str, Any]] | None:
    pods = job_pods(bed, ns, job)
    if set(pods) != {"0", "1"} or not all(map(running, pods.values())):
        return None
    leader = pods["0"]["metadata"]["name"]
    joined = "all 2 node ranks joined" in log_of(bed, ns, leader, builders.SERVER_CONTAINER)
    return pods if joined else None


def test_a_two_node_clone_forms_its_group_profiles_on_rank_0_and_ends_every_rank(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    bed, ns = realnode_cluster, realnode_namespace
    plan = group_plan(bed, ns, "group-ok")
    job = create_run(bed, ns, plan)
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["parallelism"] == 2

    pods = wait_for(
        "both ranks running and the group formed",
        lambda: group_formed(bed, ns, "group-ok"),
        timeout=240,
    )
    # Each rank pinned to the product with the target's GPUs; its rank is its index.
    for index, pod in pods.items():
        node = get_json(bed, "node", pod["spec"]["nodeName"])
        assert node["metadata"]["labels"][plan.spec.gpu_product_label] == GPU_H100
        server = next(
            c for c in pod["spec"]["initContainers"] if c["name"] == builders.SERVER_CONTAINER
        )
        assert server["resources"]["limits"]["nvidia.com/gpu"] == "2"
        assert pod["spec"]["hostname"] == f"group-ok-{index}"
    worker = pods["1"]["metadata"]["name"]
    assert "node rank 1 joined the group of 2" in log_of(bed, ns, worker, builders.SERVER_CONTAINER)
    assert "node rank 1 of a group: rank 0 profiles; holding" in log_of(
        bed, ns, worker, builders.PROFILER_CONTAINER
    )

    done = wait_for(
        "the Job to succeed on rank 0's profiler",
        lambda: job_condition(bed, ns, "group-ok", "Complete", "Failed"),
        timeout=420,
    )
    assert done["type"] == "Complete", done
    stored = get_json(bed, "job", "group-ok", "-n", ns)
    assert stored["status"].get("completedIndexes") == "0", stored["status"]

    # The result: rounds a valid diagonal table is fitted from, measured through the leader.
    cm = get_json(bed, "configmap", plan.result_config_map, "-n", ns)
    result = read_result(cm.get("data"), cm.get("binaryData"))
    assert result.status == STATUS_SUCCEEDED and result.rounds, result
    verdict = judge(result.rounds, plan.spec, kind=TableKind.DIAGONAL, gate=False)
    assert verdict.accepted and verdict.table_json, verdict
    load_sps_table_text(verdict.table_json)  # SGLang's loader's rules

    # Kubernetes ended the worker: no rank keeps its GPUs.
    wait_for(
        "no pod of the Job left running",
        lambda: not any(map(running, job_pods(bed, ns, "group-ok").values())),
        timeout=90,
    )
    service = get_json(bed, "service", "sps-group-ok", "-n", ns)
    assert service["metadata"]["labels"][L.LABEL_COMPONENT] == L.COMPONENT_GROUP_SERVICE


def test_a_deleted_worker_fails_the_group_at_once_naming_its_rank(
    realnode_cluster: RealNodeCluster, realnode_namespace: str
) -> None:
    bed, ns = realnode_cluster, realnode_namespace
    create_run(bed, ns, group_plan(bed, ns, "group-lost"))
    pods = wait_for("the group formed", lambda: group_formed(bed, ns, "group-lost"), timeout=240)
    bed.kubectl("delete", "pod", "-n", ns, pods["1"]["metadata"]["name"], "--wait=false")

    failed = wait_for(
        "the Job to fail",
        lambda: job_condition(bed, ns, "group-lost", "Failed", "Complete"),
        timeout=120,
    )
    assert failed["type"] == "Failed" and failed["reason"] == "MaxFailedIndexesExceeded", failed
    job = get_json(bed, "job", "group-lost", "-n", ns)
    assert job["status"]["failedIndexes"] == "1", job["status"]
    # What the run says of it, read from the live Job and pods as the operator's cache has them.
    live = get_json(bed, "pods", "-n", ns, "-l", f"{group_clone.JOB_NAME_LABEL}=group-lost")
    infos = [
        pod_info(
            p["metadata"]["name"],
            p["metadata"].get("labels") or {},
            p["spec"],
            p["status"],
            p["metadata"],
        )
        for p in live["items"]
    ]
    words = lost_ranks(SimpleNamespace(snapshot=SimpleNamespace(pods=infos)), job)  # type: ignore[arg-type]
    assert words.startswith("; the group lost rank 1"), words
    # The leader goes too: the group's GPUs are given back at once, not at the deadline.
    wait_for(
        "no pod of the failed Job left running",
        lambda: not any(map(running, job_pods(bed, ns, "group-lost").values())),
        timeout=90,
    )
