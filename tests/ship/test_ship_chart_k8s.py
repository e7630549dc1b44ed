"""The chart's rendered manifests on the local control plane (server-side apply), and the
operator running as a local process with a real token of the chart's service account."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiClient
from ship_helpers import CHART, helm, render

from sps_operator.constants import API_GROUP, API_VERSION, PLURAL
from sps_testbed.controlplane_fixtures import K8sCluster
from waiting import wait_crd_established

pytestmark = pytest.mark.k8s

SA = "sps-operator"


def apply_server_side(cluster: K8sCluster, objects: list[dict[str, Any]]) -> None:
    text = yaml.safe_dump_all(objects, sort_keys=False)
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "--field-manager=helm", "-f", "-", input=text
    )


def delete_objects(cluster: K8sCluster, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        if obj["kind"] == "CustomResourceDefinition":
            continue  # shared by the whole test session
        args = ["delete", obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found"]
        if obj["metadata"].get("namespace"):
            args += ["-n", obj["metadata"]["namespace"]]
        cluster.kubectl(*args, "--wait=false", check=False)


def can_i(
    api: ApiClient,
    user: str,
    verb: str,
    resource: str,
    namespace: str = "",
    group: str = "",
    subresource: str = "",
) -> bool:
    """A SubjectAccessReview for a service account (with its groups, as its token has)."""
    review = client.AuthorizationV1Api(api).create_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "resourceAttributes": {
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "subresource": subresource,
                    "namespace": namespace,
                },
            },
        }
    )
    return bool(review.status.allowed)


def install(cluster: K8sCluster, namespace: str, replicas: int) -> Iterator[tuple[str, str, str]]:
    """The chart in namespaces mode: operator in `<ns>-sys`, serving `namespace` only."""
    release = f"ship-{secrets.token_hex(3)}"
    system = cluster.create_namespace(f"{namespace}-sys")
    objects = render(
        "watch.mode=namespaces",
        f"watch.namespaces={{{namespace}}}",
        f"replicaCount={replicas}",
        release=release,
        namespace=system,
    )
    k8s_cluster = cluster
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    apply_server_side(k8s_cluster, crds)
    wait_crd_established(k8s_cluster.kubectl)
    rest = [o for o in objects if o["kind"] != "CustomResourceDefinition"]
    apply_server_side(k8s_cluster, rest)
    try:
        yield release, system, namespace
    finally:
        delete_objects(k8s_cluster, rest)
        k8s_cluster.delete_namespace(system)


@pytest.fixture
def installed(k8s_cluster: K8sCluster, namespace: str) -> Iterator[tuple[str, str, str]]:
    # No operator pod: the control plane has no nodes (the operator runs from its image
    # on real nodes in tests/realnode).
    yield from install(k8s_cluster, namespace, replicas=0)


def test_ship_chart_applies_server_side_with_its_objects(
    k8s_cluster: K8sCluster, installed: tuple[str, str, str]
) -> None:
    release, system, watched = installed
    fullname = f"{release}-sps-operator"
    deployment = json.loads(
        k8s_cluster.kubectl("get", "deployment", fullname, "-n", system, "-o", "json")
    )
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == fullname
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert "--namespace=" + watched in pod["containers"][0]["args"]
    k8s_cluster.kubectl("get", "serviceaccount", fullname, "-n", system)
    k8s_cluster.kubectl("get", "service", f"{fullname}-metrics", "-n", system)
    k8s_cluster.kubectl("get", "role", fullname, "-n", watched)
    k8s_cluster.kubectl("get", "rolebinding", fullname, "-n", watched)
    k8s_cluster.kubectl("get", "clusterrole", f"{fullname}-cluster")

    # The API server's own dry run of an install (schema, templates, NOTES) succeeds too,
    # for a second release watching another namespace; one watching the same namespace is
    # refused (both operators would act on its profiles), naming the first.
    def dry_run(namespace: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return helm(
            "install",
            f"{release}-dry",
            str(CHART),
            "--dry-run=server",
            "--namespace",
            system,
            "--kubeconfig",
            str(k8s_cluster.kubeconfig),
            "--set",
            "crds.enabled=false",  # the session's CRD belongs to no release
            "--set",
            "watch.mode=namespaces",
            "--set",
            f"watch.namespaces={{{namespace}}}",
            check=check,
        )

    assert f"It serves SpsProfiles in: {system}." in dry_run(system).stdout
    refused = dry_run(watched, check=False)
    assert refused.returncode != 0
    assert f"ServiceAccount {system}/{fullname} watches namespace {watched}" in refused.stderr


def test_ship_chart_rbac_grants_what_the_operator_needs_and_no_more(
    k8s_cluster: K8sCluster, k8s_api: ApiClient, installed: tuple[str, str, str]
) -> None:
    release, system, watched = installed
    user = f"system:serviceaccount:{system}:{release}-sps-operator"
    other = system  # any namespace it does not serve

    def allowed(verb: str, resource: str, ns: str = "", group: str = "", sub: str = "") -> bool:
        return can_i(k8s_api, user, verb, resource, ns, group=group, subresource=sub)

    assert allowed("watch", "spsprofiles", watched, group=API_GROUP)
    assert allowed("patch", "spsprofiles", watched, group=API_GROUP, sub="status")
    assert allowed("create", "jobs", watched, group="batch")
    assert allowed("create", "configmaps", watched)
    assert allowed("patch", "deployments", watched, group="apps")
    assert allowed("create", "serviceaccounts", watched)
    assert allowed("create", "roles", watched, group="rbac.authorization.k8s.io")
    assert allowed("list", "nodes")
    # Limited to the listed namespace, and never secrets or spec updates.
    assert not allowed("create", "jobs", other, group="batch")
    assert not allowed("list", "spsprofiles", other, group=API_GROUP)
    assert not allowed("get", "secrets", watched)
    assert not allowed("update", "spsprofiles", watched, group=API_GROUP)
    assert not allowed("delete", "deployments", watched, group="apps")


def test_ship_chart_operator_runs_under_the_chart_rbac(
    k8s_cluster: K8sCluster, k8s_api: ApiClient, installed: tuple[str, str, str], tmp_path: Path
) -> None:
    """The operator, with a real token of the chart's SA, reconciles a profile with no 403."""
    release, system, watched = installed
    kubeconfig = k8s_cluster.service_account_kubeconfig(
        f"{release}-sps-operator", system, tmp_path / "sa.kubeconfig"
    )
    apps = client.AppsV1Api(k8s_api)
    apps.create_namespaced_deployment(watched, _sglang_deployment())
    _create_llama_profile(k8s_api, watched, target="llama")
    log = tmp_path / "operator.log"
    # The environment the chart's Deployment gives the pod: the Lease lives in its namespace.
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), POD_NAMESPACE=system, POD_NAME="ship-0")
    env.pop("KUBERNETES_SERVICE_HOST", None)
    # Exactly the arguments the chart renders (minus ports, which may be taken here), for
    # one replica: `installed` has no operator pod (replicaCount 0), hence no leader-election
    # Role; with the default replicaCount 2 the process would ask for a Lease it may not use.
    (deployment,) = [
        o
        for o in render(
            "watch.mode=namespaces",
            f"watch.namespaces={{{watched}}}",
            "metrics.enabled=false",
            "replicaCount=1",
            release=release,
            namespace=system,
        )
        if o["kind"] == "Deployment"
    ]
    args = [
        a
        for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        if not a.startswith("--liveness")
    ]
    args += ["--metrics-port=0", "--log-format=plain", "--verbose", "--resync-seconds=2"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sps_operator.cli", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        status = _wait_for_status(k8s_api, watched, "llama", proc, log)
        assert status.get("observedGeneration") == 1, status
        types = {c["type"] for c in status.get("conditions") or []}
        assert {"Ready", "Profiling", "TableReady"} <= types, status
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text(errors="replace")
    # An HTTP 403 in the client's request log, or kopf's "Forbidden"; not any "403" (a UID
    # in the log held one once: 29403622d751).
    denied = re.search(r'HTTP/1\.1" 403\b|\bForbidden\b', text)
    assert denied is None, text[max(0, denied.start() - 2000) : denied.end() + 500]


def _create_llama_profile(api: ApiClient, namespace: str, target: str) -> None:
    """SpsProfile `llama` selecting Deployments labelled sps.dev/profile-target=`target`."""
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        API_GROUP,
        API_VERSION,
        namespace,
        PLURAL,
        {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": "SpsProfile",
            "metadata": {"name": "llama"},
            "spec": {"selector": {"matchLabels": {"sps.dev/profile-target": target}}},
        },
    )


def _wait_for_status(
    api: ApiClient, namespace: str, name: str, proc: subprocess.Popen[bytes], log: Path
) -> dict[str, Any]:
    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"operator exited {proc.returncode}:\n{log.read_text()[:3000]}")
        obj = custom.get_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, name)
        status = obj.get("status") or {}
        if status.get("observedGeneration"):
            return dict(status)
        time.sleep(0.5)
    pytest.fail(f"no status from the operator in 90 s:\n{log.read_text()[-4000:]}")


def _sglang_deployment() -> dict[str, Any]:
    return {
        "metadata": {"name": "llama", "labels": {"sps.dev/profile-target": "llama"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "llama"}},
            "template": {
                "metadata": {"labels": {"app": "llama"}},
                "spec": {
                    "containers": [
                        {
                            "name": "sglang",
                            "image": "lmsysorg/sglang:v0.5.16",
                            "args": [
                                "python3",
                                "-m",
                                "sglang.launch_server",
                                "--model-path=meta-llama/Llama-3.1-8B-Instruct",
                                "--speculative-algorithm=DSPARK",
                                "--speculative-dspark-block-size=7",
                                "--port=30000",
                            ],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            },
        },
    }
