"""The README's install path for real: the chart, `helm install`, the image built from
the project's Dockerfile; the operator runs as the chart's Deployment under restricted
pod security, which the runtime enforces, and profiles SGLang stand-in servers end to end:
a Clone profile (the Job runs the images, the table is published, the Deployment rolled
onto it and served) and an External profile that reaches its server by Service DNS name."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from realnode_helpers import apply, get_json
from realnode_profiles import (
    SERVER_INFO,
    SIM_TIME_SCALE,
    TABLE_PATH,
    chart_installed,
    conditions,
    diagnostics,
    in_pod,
    load,
    quick,
    ready_pod_with,
    ref,
    rolled_out,
    rolled_pod,
    served_table,
    serves,
    wait_ready,
    with_env,
)

from sps_operator.api.hashing import content_hash
from sps_operator.tables.formats import SpsCostTable, load_sps_table_text
from sps_sim.costmodel import GPU_H100
from sps_testbed import RealNodeCluster
from waiting import wait_for


@pytest.fixture(scope="module")
def release(realnode_cluster: RealNodeCluster) -> Iterator[str]:
    """`helm install charts/sps-operator` into a namespace that enforces `restricted`."""
    with chart_installed(realnode_cluster, f"sps-system-{uuid.uuid4().hex[:5]}") as release_ns:
        yield release_ns


def test_helm_install_runs_the_operator_from_its_image(
    realnode_cluster: RealNodeCluster, release: str
) -> None:
    bed = realnode_cluster

    def operator_deployment() -> dict[str, Any]:
        deploy = get_json(
            bed, "deployment", "-n", release, "-l", "app.kubernetes.io/name=sps-operator"
        )
        (item,) = deploy["items"]
        return dict(item)

    # `helm install --wait` returns once replicas - maxUnavailable are Ready (the chart's
    # maxUnavailable is 1): the second replica may still be starting; wait for it.
    item = wait_for(
        "every operator replica Ready",
        lambda: (
            (d := operator_deployment())["status"].get("readyReplicas") == d["spec"]["replicas"]
            and d
        ),
        timeout=300,
    )
    replicas = item["spec"]["replicas"]
    pods = get_json(bed, "pods", "-n", release)["items"]
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    assert len(running) == replicas, [p["metadata"]["name"] for p in pods]
    for operator_pod in running:
        container = operator_pod["spec"]["containers"][0]
        assert container["image"] == bed.image("operator")
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        status = operator_pod["status"]["containerStatuses"][0]
        assert status["ready"] is True and status["restartCount"] == 0, status
        # Run from the image, not a host process: the runtime reports the image it ran.
        assert "sha256:" in status["imageID"], status["imageID"]

    # The chart's metrics Service answers by its DNS name (asked from an operator pod).
    url = f"http://sps-operator-metrics.{release}.svc.cluster.local:9090/metrics"
    fetch = (
        f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=10).read().decode())"
    )
    metrics = bed.kubectl(
        "exec", "-n", release, running[0]["metadata"]["name"], "--", "python3", "-c", fetch
    )
    assert "sps_" in metrics, metrics[:2000]


# ----------------------------------------------------------------------------- profiles


def test_a_profile_runs_its_job_from_the_images_publishes_and_rolls(
    realnode_cluster: RealNodeCluster, release: str, realnode_namespace: str
) -> None:
    """examples/sglang-deployment.yaml + examples/diagonal.yaml (a shorter sweep): the
    profiling Job runs the SGLang stand-in image (cloned server) and the operator image
    (profiler), the table is published in a ConfigMap, the Deployment is rolled onto it,
    its new pod mounts and serves exactly that table, and the profile is Ready."""
    bed, ns = realnode_cluster, realnode_namespace
    server = with_env(load("sglang-deployment.yaml"), {"SPS_SIM_TIME_SCALE": SIM_TIME_SCALE})
    apply(bed, ns, server, quick(load("diagonal.yaml")))
    prof = wait_ready(bed, release, ns, "llama")
    # Ready says every target runs its table: the Deployment's rollout is complete.
    assert rolled_out(get_json(bed, "deployment", "llama", "-n", ns)), diagnostics(
        bed, release, ns, "llama"
    )

    status = prof["status"]
    assert prof["status"]["observedGeneration"] == prof["metadata"]["generation"]
    (table,) = status["tables"]
    assert table["gpuProduct"] == GPU_H100 and table["kind"] == "Diagonal"
    assert status["liveTable"] == table["configMap"]
    conds = conditions(prof)
    assert conds["TableReady"] == "True" and conds["RolledOut"] == "True", conds

    # The Job ran on an H100 node, from the images: the cloned server from the stand-in,
    # the profiler from the operator's image.
    job = get_json(bed, "job", table["run"], "-n", ns)
    assert job["status"].get("succeeded") == 1, job["status"]
    (job_pod,) = get_json(bed, "pods", "-n", ns, "-l", f"job-name={table['run']}")["items"]
    statuses = {
        s["name"]: s
        for s in job_pod["status"].get("initContainerStatuses", [])
        + job_pod["status"].get("containerStatuses", [])
    }
    images = {
        c["name"]: c["image"]
        for c in job_pod["spec"].get("initContainers", []) + job_pod["spec"]["containers"]
    }
    (sidecar,) = (c["name"] for c in job_pod["spec"]["initContainers"] if c["name"] != "profiler")
    assert ref(images[sidecar]) == ref(bed.image("sglang")), images
    assert images["profiler"] == bed.image("operator"), images
    for name in (sidecar, "profiler"):
        assert "sha256:" in statuses[name]["imageID"], statuses[name]
    assert statuses["profiler"]["state"]["terminated"]["exitCode"] == 0, statuses["profiler"]
    node = get_json(bed, "node", job_pod["spec"]["nodeName"])
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == GPU_H100

    # The table ConfigMap: immutable, loadable by SGLang's rules, named by its content hash.
    cm = get_json(bed, "configmap", table["configMap"], "-n", ns)
    assert cm["immutable"] is True
    text = cm["data"]["table.json"]
    assert isinstance(load_sps_table_text(text), SpsCostTable)
    assert content_hash(text) == table["hash"]

    # The Deployment rolled onto it: a Ready pod with the table's hash, from the stand-in
    # image, the ConfigMap mounted at the table path, the flag passed.
    serving = rolled_pod(bed, ns, "llama", table["hash"])
    (container,) = serving["spec"]["containers"]
    assert ref(container["image"]) == ref(bed.image("sglang"))
    (cstatus,) = serving["status"]["containerStatuses"]
    assert "sha256:" in cstatus["imageID"], cstatus
    i = container["args"].index("--speculative-dspark-sps-table-path")
    assert container["args"][i + 1] == TABLE_PATH
    mount = next(m for m in container["volumeMounts"] if TABLE_PATH.startswith(m["mountPath"]))
    volume = next(v for v in serving["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == table["configMap"]

    # What the container sees at the path is the ConfigMap's text, and the server loaded it.
    name = serving["metadata"]["name"]
    mounted = bed.kubectl("exec", "-n", ns, name, "-c", "sglang", "--", "cat", TABLE_PATH)
    assert mounted == text
    served = served_table(bed, ns, name, "sglang")
    assert served["path"] == TABLE_PATH and served["loaded"] is True, served
    assert served["kind"] == "diagonal" and served["sha256"] == table["hash"], served

    # Deleting the profile (the chart's RBAC removes the finalizer) removes the run's
    # objects and leaves the Deployment serving its table.
    bed.kubectl("delete", "spsprofile", "llama", "-n", ns, "--timeout=180s")
    # The Job goes by garbage collection (its ownerReference), which follows the profile.
    wait_for(
        "the run's Job garbage-collected",
        lambda: not get_json(bed, "jobs", "-n", ns, "-l", "sps.dev/profile=llama")["items"],
        timeout=120,
    )
    assert get_json(bed, "configmap", table["configMap"], "-n", ns)
    assert rolled_out(get_json(bed, "deployment", "llama", "-n", ns))


def test_gitops_annotate_only_fills_the_mounted_config_map(
    realnode_cluster: RealNodeCluster, release: str, realnode_namespace: str
) -> None:
    """examples/gitops: the Deployment as Git has it mounts a ConfigMap that does not exist
    yet; the operator fills it and bumps the pod-template annotation, and the kubelet's
    mount of it is what the server loads."""
    bed, ns = realnode_cluster, realnode_namespace
    server = with_env(load("gitops/deployment.yaml"), {"SPS_SIM_TIME_SCALE": SIM_TIME_SCALE})
    apply(bed, ns, server, quick(load("gitops/spsprofile.yaml")))
    prof = wait_ready(bed, release, ns, "llama-gitops")
    (table,) = prof["status"]["tables"]
    stable = prof["spec"]["rollout"]["tableConfigMap"]
    text = get_json(bed, "configmap", stable, "-n", ns)["data"]["table.json"]
    assert content_hash(text) == table["hash"]
    serving = wait_for(
        "a Ready pod of the annotated Deployment",
        lambda: ready_pod_with(bed, ns, "llama-gitops", table["hash"]),
        timeout=300,
    )
    name = serving["metadata"]["name"]
    assert bed.kubectl("exec", "-n", ns, name, "-c", "sglang", "--", "cat", TABLE_PATH) == text
    served = served_table(bed, ns, name, "sglang")
    assert served["loaded"] is True and served["sha256"] == table["hash"], served


def test_an_external_profile_reaches_its_server_by_service_dns_name(
    realnode_cluster: RealNodeCluster, release: str, realnode_namespace: str
) -> None:
    """examples/external.yaml: the server in profiling mode is a Deployment of its own behind
    a Service; the profile names it by its cluster DNS name. The Job (the profiler alone)
    reaches it through CoreDNS and kube-proxy, the table is published and rolled into the
    Deployment the profile selects."""
    bed, ns = realnode_cluster, realnode_namespace
    example = load("sglang-deployment.yaml")
    fast = {"SPS_SIM_TIME_SCALE": SIM_TIME_SCALE}

    def named(dep: dict[str, Any], name: str, labels: dict[str, str]) -> dict[str, Any]:
        out = copy.deepcopy(dep)
        out["metadata"] = {"name": name, "labels": labels}
        out["spec"]["selector"] = {"matchLabels": {"app": name}}
        out["spec"]["template"]["metadata"] = {"labels": {"app": name}}
        return out

    # The profiling server: same image, model and flags, in profiling mode (what the
    # example's comment asks for), not selected by the profile.
    profiling = named(
        with_env(
            example,
            {
                **fast,
                "SGLANG_DSPARK_ENABLE_SPS_RECORD": "1",
                "SGLANG_SIMULATE_ACC_LEN": "1.0",
                "SGLANG_RAGGED_VERIFY_MODE": "static",
            },
        ),
        "sglang-profiling",
        {"app": "sglang-profiling"},
    )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "sglang-profiling"},
        "spec": {
            "selector": {"app": "sglang-profiling"},
            "ports": [{"name": "http", "port": 30000, "targetPort": "http"}],
        },
    }
    target = named(
        with_env(example, fast),
        "llama-external",
        {"app": "llama-external", "sps.dev/profile-target": "llama-external"},
    )
    url = f"http://sglang-profiling.{ns}.svc.cluster.local:30000"
    profile = quick(load("external.yaml"))
    profile["spec"]["server"]["url"] = url
    apply(bed, ns, profiling, service, target, profile)
    prof = wait_ready(bed, release, ns, "llama-external")
    assert rolled_out(get_json(bed, "deployment", "llama-external", "-n", ns))

    status = prof["status"]
    (table,) = status["tables"]
    assert table["gpuProduct"] == GPU_H100 and table["kind"] == "Diagonal"
    assert status["liveTable"] == table["configMap"]

    # The Job: only the profiler (no cloned server), pointed at the Service's DNS name.
    job = get_json(bed, "job", table["run"], "-n", ns)
    assert job["status"].get("succeeded") == 1, job["status"]
    pod_spec = job["spec"]["template"]["spec"]
    assert not pod_spec.get("initContainers"), pod_spec.get("initContainers")
    (profiler,) = pod_spec["containers"]
    assert profiler["image"] == bed.image("operator")
    assert url in " ".join(profiler["args"]), profiler["args"]

    # The profiling server was driven: its engine stepped (through the Service, the only
    # way the Job knows it).
    (server_pod,) = get_json(bed, "pods", "-n", ns, "-l", "app=sglang-profiling")["items"]
    info = json.loads(in_pod(bed, ns, server_pod["metadata"]["name"], "sglang", SERVER_INFO))
    assert info["sim_stats"]["decode_steps"] > 0, info["sim_stats"]

    # Published and served by the selected Deployment.
    cm = get_json(bed, "configmap", table["configMap"], "-n", ns)
    text = cm["data"]["table.json"]
    assert isinstance(load_sps_table_text(text), SpsCostTable)
    assert content_hash(text) == table["hash"]
    serves(bed, ns, "llama-external", table["hash"])


def test_the_standby_takes_over_when_the_leader_pod_goes(
    realnode_cluster: RealNodeCluster, release: str, realnode_namespace: str
) -> None:
    """Two replicas elect a leader on a Lease: deleting the leader's pod (the kubelet stops
    its container) hands the Lease to the other replica, which then profiles and rolls."""
    bed, ns = realnode_cluster, realnode_namespace

    def holder() -> str:
        lease = get_json(bed, "lease", "sps-operator", "-n", release)
        return str(lease["spec"].get("holderIdentity") or "")

    leader = wait_for("a leader holds the Lease", holder, timeout=120)
    bed.kubectl("delete", "pod", leader, "-n", release, "--timeout=120s")
    replicas = {p["metadata"]["name"] for p in get_json(bed, "pods", "-n", release)["items"]}
    new_leader = wait_for(
        "another replica takes the Lease",
        lambda: (h := holder()) and h != leader and h in replicas and h,
        timeout=180,
    )
    assert new_leader != leader

    server = with_env(load("sglang-deployment.yaml"), {"SPS_SIM_TIME_SCALE": SIM_TIME_SCALE})
    apply(bed, ns, server, quick(load("diagonal.yaml")))
    prof = wait_ready(bed, release, ns, "llama")
    (table,) = prof["status"]["tables"]
    rolled_pod(bed, ns, "llama", table["hash"])
