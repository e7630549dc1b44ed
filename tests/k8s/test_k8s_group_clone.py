"""The API server takes a multi-node clone's objects as the builders make them (issue 34
§2): the Indexed Job's group fields survive validation and defaulting, the headless
Service without ports is valid, and it goes with the Job that owns it."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from sps_operator.api.kinds import RunPhase
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.controller.kube import builders
from sps_operator.controller.sglang.serverconfig import parse_server
from waiting import wait_for

pytestmark = pytest.mark.k8s

ARGS = [
    "--model-path", "m", "--speculative-algorithm", "DSPARK", "--tp", "4", "--nnodes", "2",
    "--node-rank", "$(LWS_WORKER_INDEX)", "--dist-init-addr", "$(LWS_LEADER_ADDRESS):5000",
]  # fmt: skip


def test_k8s_the_group_job_and_its_headless_service_are_valid_as_built(
    k8s_api: ApiClient, namespace: str
) -> None:
    container = {
        "name": "sglang",
        "image": "lmsysorg/sglang:v1",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ARGS,
        "resources": {"limits": {"nvidia.com/gpu": "2"}},
    }
    plan = builders.RunPlan(
        profile=builders.ProfileRef("group", namespace, "uid-group"),
        spec=SpsProfileSpec.model_validate({"selector": {"matchLabels": {"app": "g"}}}),
        run="group-abc",
        phase=RunPhase.DIAGONAL,
        gpu_product="NVIDIA-H100-80GB-HBM3",
        fingerprint="f" * 16,
        target_pod_spec={"containers": [container]},
        server_container="sglang",
        server=parse_server(container),
    )
    job = builders.profiling_job(plan)
    job["metadata"].pop("ownerReferences")  # no such profile here
    core, batch = client.CoreV1Api(k8s_api), client.BatchV1Api(k8s_api)
    uid = batch.create_namespaced_job(namespace, job).metadata.uid
    core.create_namespaced_service(namespace, builders.group_service(plan, uid))

    stored = json.loads(
        batch.read_namespaced_job("group-abc", namespace, _preload_content=False).data
    )
    spec = stored["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert (spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (0, 0)
    assert spec["template"]["spec"]["subdomain"] == "sps-group-abc"
    svc = json.loads(
        core.read_namespaced_service("sps-group-abc", namespace, _preload_content=False).data
    )
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"]
    assert [(o["kind"], o["uid"]) for o in svc["metadata"]["ownerReferences"]] == [("Job", uid)]

    # The Job owns its Service: the garbage collector deletes it with the Job.
    batch.delete_namespaced_job(
        "group-abc", namespace, body=client.V1DeleteOptions(propagation_policy="Background")
    )
    wait_for(
        "the group's Service to go with its Job",
        lambda: "sps-group-abc" not in {s.metadata.name for s in
                                        core.list_namespaced_service(namespace).items},
    )  # fmt: skip
